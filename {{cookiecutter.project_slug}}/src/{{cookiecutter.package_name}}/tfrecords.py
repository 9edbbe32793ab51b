"""The record format: tf.train.Example with a float `features` list and an int64 `label`.

`make-data` writes it, `index` reads every record of it once (manifest.py), and
`train` parses it a batch of records at a time (one parse_example call per batch,
not one op per record).
"""

from pathlib import Path

import tensorflow as tf

# What the manifest records as the format its counts and checks are about.
FORMAT = "tf.train.Example: features float32[N], label int64"


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


def parse_batch(records, num_features):
    """A batch of serialized records -> (features [batch, num_features], int32 labels)."""
    examples = tf.io.parse_example(records, feature_spec(num_features))
    return examples["features"], tf.cast(examples["label"], tf.int32)


def describe_batch(records):
    """What `index` learns from a batch of records, whatever their shape: each
    record's feature length, label count, and the labels."""
    examples = tf.io.parse_example(
        records,
        {
            "features": tf.io.RaggedFeature(tf.float32),
            "label": tf.io.RaggedFeature(tf.int64),
        },
    )
    return (
        examples["features"].row_lengths(),
        examples["label"].row_lengths(),
        examples["label"].flat_values,
    )
