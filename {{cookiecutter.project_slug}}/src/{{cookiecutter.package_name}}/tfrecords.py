{%- if cookiecutter.task == "image" -%}
"""The record format: tf.train.Example with JPEG bytes in `image/encoded` and an
int64 `image/class/label`: the layout of the ImageNet conversion scripts of
tensorflow/models and the TPU reference models, so existing shards train as
they are (1-based labels: --label-offset 1).

`make-data` writes it, `index` reads every record of it once (manifest.py), and
`train` parses it a batch of records at a time (one parse_example call per
batch), then decodes each image (images.py).
"""

from pathlib import Path

import tensorflow as tf

# What the manifest records as the format its counts and checks are about.
FORMAT = "tf.train.Example: image/encoded JPEG, image/class/label int64"


def feature_spec():
    return {
        "image/encoded": tf.io.FixedLenFeature([], tf.string),
        "image/class/label": tf.io.FixedLenFeature([], tf.int64),
    }


def shard_name(split, index, num_files):
    return f"{split}-{index:05d}-of-{num_files:05d}.tfrecord"


def encode(image, label):
    """One uint8 image (height, width, 3) and its label, as the conversion scripts write them."""
    height, width, channels = image.shape
    features = {
        "image/encoded": tf.train.Feature(
            bytes_list=tf.train.BytesList(value=[tf.io.encode_jpeg(image, quality=95).numpy()])
        ),
        "image/format": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"JPEG"])),
        "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])),
        "image/height": tf.train.Feature(int64_list=tf.train.Int64List(value=[height])),
        "image/width": tf.train.Feature(int64_list=tf.train.Int64List(value=[width])),
        "image/channels": tf.train.Feature(int64_list=tf.train.Int64List(value=[channels])),
    }
    example = tf.train.Example(features=tf.train.Features(feature=features))
    return example.SerializeToString()
{%- else -%}
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
{%- endif %}


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
{%- if cookiecutter.task == "image" %}


def parse_batch(records):
    """A batch of serialized records -> (JPEG bytes, int64 labels as stored)."""
    examples = tf.io.parse_example(records, feature_spec())
    return examples["image/encoded"], examples["image/class/label"]


def describe_batch(records, decode=True):
    """What `index` learns from a batch of records, whatever they hold: each
    record's image shape (decoding the whole image; with decode=False, from the
    JPEG header alone), label count, and the labels."""
    examples = tf.io.parse_example(
        records,
        {
            "image/encoded": tf.io.FixedLenFeature([], tf.string, default_value=""),
            "image/class/label": tf.io.RaggedFeature(tf.int64),
        },
    )
    shapes = tf.map_fn(
        decoded_shape if decode else tf.io.extract_jpeg_shape,
        examples["image/encoded"],
        fn_output_signature=tf.TensorSpec([3], tf.int32),
    )
    labels = examples["image/class/label"]
    return shapes, labels.row_lengths(), labels.flat_values


def decoded_shape(encoded):
    """A JPEG's shape as training decodes it (3 channels), decoding all of it with
    training's decoder (the whole image as the crop window): a truncated or corrupt
    image fails here, in `index`, not at the step that first crops it."""
    height, width = tf.unstack(tf.io.extract_jpeg_shape(encoded)[:2])
    window = tf.stack([0, 0, height, width])
    return tf.shape(tf.io.decode_and_crop_jpeg(encoded, window, channels=3))
{%- else %}


def parse_batch(records, num_features):
    """A batch of serialized records -> (features [batch, num_features], int32 labels)."""
    examples = tf.io.parse_example(records, feature_spec(num_features))
    return examples["features"], tf.cast(examples["label"], tf.int32)


def describe_batch(records):
    """What `index` learns from a batch of records, whatever their shape: each
    record's feature shape, label count, and the labels."""
    examples = tf.io.parse_example(
        records,
        {
            "features": tf.io.RaggedFeature(tf.float32),
            "label": tf.io.RaggedFeature(tf.int64),
        },
    )
    lengths = examples["features"].row_lengths()
    labels = examples["label"]
    return lengths[:, None], labels.row_lengths(), labels.flat_values
{%- endif %}
