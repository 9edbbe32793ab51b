"""TFRecord shards of (features, label) examples: written by `make-data`, read by `train`."""

from pathlib import Path

import tensorflow as tf

from {{ cookiecutter.package_name }} import TrainerError


class RecordError(TrainerError):
    pass


def feature_spec(num_features):
    return {
        "features": tf.io.FixedLenFeature([num_features], tf.float32),
        "label": tf.io.FixedLenFeature([], tf.int64),
    }


def shard_name(split, index, num_files):
    return f"{split}-{index:05d}-of-{num_files:05d}.tfrecord"


def encode(features, label):
    example = tf.train.Example(
        features=tf.train.Features(
            feature={
                "features": tf.train.Feature(float_list=tf.train.FloatList(value=features)),
                "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])),
            }
        )
    )
    return example.SerializeToString()


def write_split(output_dir, split, features, labels, num_files):
    """Write one split as `num_files` shards, round-robin; returns their paths."""
    paths = [Path(output_dir) / shard_name(split, i, num_files) for i in range(num_files)]
    writers = [tf.io.TFRecordWriter(str(path)) for path in paths]
    try:
        for index, (row, label) in enumerate(zip(features, labels, strict=True)):
            writers[index % num_files].write(encode(row, label))
    finally:
        for writer in writers:
            writer.close()
    return paths


def find_files(data_dir, split):
    """The split's shard files, in name order; a clear error if there are none."""
    directory = Path(data_dir)
    if not directory.is_dir():
        raise RecordError(
            f"data directory {directory} does not exist - create it with"
            f" `make-data --output-dir {directory}` or pass --data-dir"
        )
    files = sorted(str(path) for path in directory.glob(f"{split}-*.tfrecord"))
    if not files:
        raise RecordError(
            f"no {split}-*.tfrecord files in {directory} - create them with"
            f" `make-data --output-dir {directory}`"
        )
    for path in files:
        if Path(path).stat().st_size == 0:
            raise RecordError(f"{path} is empty - regenerate or remove it")
    return files


def count_records(path):
    """Records in one file, reading it whole: a corrupt file fails here, not mid-run."""
    try:
        return int(tf.data.TFRecordDataset(path).reduce(0, lambda count, _: count + 1))
    except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as err:
        raise RecordError(
            f"{path} is corrupt ({err.message.splitlines()[0]}) - regenerate or remove it"
        ) from None


def check_first_record(path, num_features):
    try:
        for record in tf.data.TFRecordDataset(path).take(1):
            tf.io.parse_single_example(record, feature_spec(num_features))
    except tf.errors.InvalidArgumentError:
        raise RecordError(
            f"{path} does not hold examples with a {num_features}-value 'features' and"
            " an int64 'label' - write it with make-data's format (tfrecords.encode)"
        ) from None


def check_files(files, num_features):
    """Read every file once before training; return each one's record count."""
    counts = []
    for path in files:
        counts.append(count_records(path))
        check_first_record(path, num_features)
    return counts


def read_examples(files, num_features, total):
    """Unbatched (features, label) examples from checked `files` holding `total`."""
    spec = feature_spec(num_features)

    def parse(record):
        example = tf.io.parse_single_example(record, spec)
        return example["features"], tf.cast(example["label"], tf.int32)

    dataset = tf.data.Dataset.from_tensor_slices(files)
    dataset = dataset.interleave(
        tf.data.TFRecordDataset, cycle_length=tf.data.AUTOTUNE, deterministic=True
    )
    dataset = dataset.map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.apply(tf.data.experimental.assert_cardinality(total))
