

def feature_shape_of(path, shapes):
    """The one feature shape of `path`'s records."""
    if len(shapes) > 1:
        found = " and ".join(str(shape[0]) for shape in sorted(shapes)[:2])
        raise ManifestError(
            f"{path} holds features of different lengths ({found}) - every record needs"
            " the same number of 'features' values"
        )
    return shapes.pop()


def unreadable(path, start):
    """The error for `path`, whose batch of records from `start` on did not parse."""
    del start  # a whole batch fails to parse: no record to name
    return not_of_the_format(path)


def check_shard(shard, label_offset):
    """A shard's features, of the shape the model takes, and its labels."""
    if shard.feature_shape != tuple(INPUT_SHAPE):
        raise ManifestError(
            f"{shard.path} holds features of shape {list(shard.feature_shape)}, the model"
            f" takes {list(INPUT_SHAPE)} - fix the data, or INPUT_SHAPE in task.py"
        )
    check_shard_labels(shard, label_offset)
