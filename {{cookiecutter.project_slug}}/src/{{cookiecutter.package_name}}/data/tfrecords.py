"""Shard files: their names, and writing examples into them in the task's
record format (record_format.encode).

`make-data` and the tests write shards here; `index` lists them (data/manifest.py).
"""

import operator
from pathlib import Path

import tensorflow as tf

from {{ cookiecutter.package_name }}.data.record_format import encode


def shard_name(split, index, num_files):
    return f"{split}-{index:05d}-of-{num_files:05d}.tfrecord"


def write_split(output_dir, split, inputs, labels, num_files):
    """Write one split as `num_files` shards, round-robin; returns their paths."""
    paths = [Path(output_dir) / shard_name(split, i, num_files) for i in range(num_files)]
    writers = [tf.io.TFRecordWriter(str(path)) for path in paths]
    try:
        for index, label in enumerate(labels):
            # One example's input: its row of each array (inputs may be a dict of them).
            example = tf.nest.map_structure(operator.itemgetter(index), inputs)
            writers[index % num_files].write(encode(example, label))
    finally:
        for writer in writers:
            writer.close()
    return paths
