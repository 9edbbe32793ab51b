

def feature_shape_of(path, shapes):
    """Images may differ in size (training crops and resizes them): the smallest."""
    del path  # any sizes are fine
    return tuple(int(side) for side in np.min(sorted(shapes), axis=0))


def unreadable(path, start):
    """The error for `path`, whose batch of records from `start` on did not read:
    the record whose JPEG does not decode, when that is why."""
    number = undecodable_record(path, start)
    if number is None:
        return not_of_the_format(path)
    return ManifestError(
        f"{path} record {number} holds a JPEG that does not decode (truncated or corrupt)"
        f" - re-encode that image or drop the record, then run"
        f" `{INDEX_COMMAND} {os.path.dirname(path)}`"
    )


def undecodable_record(path, start):
    """The number (0-based, in the file) of the first record of `path` from `start`
    on whose image has a JPEG header but does not decode; None if a record that is
    not of the format comes first. One record at a time: run only to name the
    record of a batch that failed."""
    for number, record in enumerate(tf.data.TFRecordDataset(path).skip(start), start):
        try:
            describe_batch(record[None], decode=False)
        except tf.errors.InvalidArgumentError:
            return None
        try:
            describe_batch(record[None])
        except tf.errors.InvalidArgumentError:
            return number
    return None


def check_shard(shard, label_offset):
    """A shard's labels (its images may be of any size: see feature_shape_of)."""
    check_shard_labels(shard, label_offset)
