

def feature_shape_of(path, shapes):
    """The one count of values of each input field that `path`'s records hold."""
    if len(shapes) > 1:
        first, second = sorted(shapes)[:2]
        at = next(i for i, (a, b) in enumerate(zip(first, second, strict=True)) if a != b)
        raise ManifestError(
            f"{path} holds records of {first[at]} and of {second[at]}"
            f" {list(INPUT_VALUES)[at]!r} values - every record needs the same number"
        )
    return shapes.pop()


def unreadable(path, start):
    """The error for `path`, whose batch of records from `start` on did not parse."""
    del start  # a whole batch fails to parse: no record to name
    return not_of_the_format(path)


def check_shard(shard, label_offset):
    """A shard's inputs, of the shapes the model takes, and its labels."""
    for (name, expected), found in zip(INPUT_VALUES.items(), shard.feature_shape, strict=True):
        if found != expected:
            raise ManifestError(
                f"{shard.path} holds {found} {name!r} values a record, the model takes"
                f" {expected} - fix the data, or its shape in task.py"
            )
    check_shard_labels(shard, label_offset)
