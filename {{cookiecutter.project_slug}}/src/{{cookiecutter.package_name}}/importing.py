{%- if cookiecutter.task == "image" -%}
"""Images as they come: a class-per-folder tree (the `image_dataset_from_directory`
layout: one folder per class, classes in name order) -> shards in the task's
record format (task.encode), and their manifest.

The files are shuffled (seeded) before they are dealt to the shards, so every
shard holds every class. Each shard is written by its own process, --workers at
a time, under a hidden name, and all are renamed once every one is done: a file
that does not decode is named in one line and no shard is left behind.
{%- else -%}
"""CSV files as they come -> shards in the task's record format (task.encode),
and their manifest.

A header row names the columns: `--label-column` holds the class (an integer
in 0..NUM_CLASSES-1), every other column a feature, in header order. Each CSV
file becomes one shard, written by its own process, --workers at a time, under a
hidden name; all are renamed once every one is done: a bad row is named in one
line and no shard is left behind. Split a large file into parts (`split -l`,
each part with the header) to convert it in parallel and to give each worker
files of its own.
{%- endif %}
"""

import concurrent.futures
{%- if cookiecutter.task == "tabular" %}
import csv
{%- endif %}
import multiprocessing
import os
{%- if cookiecutter.task == "image" %}
import random
{%- endif %}

{% if cookiecutter.task == "tabular" %}import numpy as np
{% endif %}import tensorflow as tf

from {{ cookiecutter.package_name }} import TrainerError, manifest
{%- if cookiecutter.task == "image" %}
from {{ cookiecutter.package_name }}.task import NUM_CLASSES, encode
{%- else %}
from {{ cookiecutter.package_name }}.task import INPUT_SHAPE, NUM_CLASSES, encode
{%- endif %}
from {{ cookiecutter.package_name }}.tfrecords import shard_name
{%- if cookiecutter.task == "image" %}

# What TensorFlow's decode_image reads (as image_dataset_from_directory).
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".gif", ".bmp")
# Images per shard when --num-files is not given: about 100-200 MB of ImageNet JPEGs.
IMAGES_PER_SHARD = 1024
{%- endif %}


class ConversionError(TrainerError):
    pass


def check_output_dir(output_dir):
    if tf.io.gfile.glob(os.path.join(output_dir, "*.tfrecord")):
        raise ConversionError(
            f"--output-dir {output_dir} already holds shards - pass a new or empty directory"
        )
    tf.io.gfile.makedirs(output_dir)


def convert(jobs, write_shard, workers):
    """Run write_shard(sources, target) for each (sources, target) of `jobs` in
    its own process, `workers` at a time (1: one after the other, in this
    process); rename the shards into place when all are written, or remove them
    all and raise the first error."""
    partials = [
        os.path.join(os.path.dirname(target), f".partial-{os.path.basename(target)}")
        for _, target in jobs
    ]
    try:
        if workers == 1:
            for (sources, _), partial in zip(jobs, partials, strict=True):
                write_shard(sources, partial)
        else:
            write_in_processes(write_shard, [sources for sources, _ in jobs], partials, workers)
    except BaseException:
        for partial in partials:
            if tf.io.gfile.exists(partial):
                tf.io.gfile.remove(partial)
        raise
    for partial, (_, target) in zip(partials, jobs, strict=True):
        tf.io.gfile.rename(partial, target)


def write_in_processes(write_shard, sources, targets, workers):
    # spawn, not fork: a forked copy of a process running TensorFlow's threads can hang.
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
        written = [pool.submit(write_shard, *job) for job in zip(sources, targets, strict=True)]
        for future in written:
            future.result()
{%- if cookiecutter.task == "image" %}


def import_images(
    output_dir, source, eval_source=None, eval_fraction=0.1, num_files=None, workers=None, seed=0
):
    """Shards of `source`'s images (and `eval_source`'s, or a seeded `eval_fraction`
    of `source`'s for evaluation) in `output_dir`, indexed; returns the class
    names (label i is classes[i]) and the manifest's splits."""
    classes, train = labelled_images(source)
    if eval_source:
        eval_classes, evaluation = labelled_images(eval_source)
        if eval_classes != classes:
            raise ConversionError(
                f"{eval_source} has classes {eval_classes}, {source} has {classes} - give"
                " both the same class folders"
            )
    else:
        if not 0 < eval_fraction < 1:
            raise ConversionError(
                f"--eval-fraction {eval_fraction} is not between 0 and 1 - pass e.g. 0.1,"
                " or --eval-source"
            )
        count = max(1, round(len(train) * eval_fraction))
        if count >= len(train):
            raise ConversionError(
                f"{source} has {len(train)} images: too few to hold out {eval_fraction:.0%}"
                " for evaluation - add images or pass --eval-source"
            )
        random.Random(seed).shuffle(train)
        evaluation, train = train[:count], train[count:]
    check_output_dir(output_dir)
    random.Random(seed + 1).shuffle(train)  # every shard holds every class
    jobs = shard_jobs(output_dir, "train", train, num_files)
    jobs += shard_jobs(output_dir, "eval", sorted(evaluation), None)
    convert(jobs, write_image_shard, workers)
    return classes, manifest.index(output_dir)


def labelled_images(source):
    """([class names], [(path, label)]): folders in name order are the classes."""
    if not tf.io.gfile.isdir(source):
        raise ConversionError(f"{source} is not a directory - pass a folder of class folders")
    classes = sorted(
        name.rstrip("/")
        for name in tf.io.gfile.listdir(source)
        if tf.io.gfile.isdir(os.path.join(source, name))
    )
    if len(classes) != NUM_CLASSES:
        raise ConversionError(
            f"{source} has {len(classes)} class folders, the task has {NUM_CLASSES} classes -"
            " give one folder per class, or change NUM_CLASSES in task.py"
        )
    images = [
        (os.path.join(source, name, file), label)
        for label, name in enumerate(classes)
        for file in sorted(tf.io.gfile.listdir(os.path.join(source, name)))
        if file.lower().endswith(IMAGE_SUFFIXES)
    ]
    if not images:
        raise ConversionError(f"{source} holds no images ({', '.join(IMAGE_SUFFIXES)})")
    return classes, images


def shard_jobs(output_dir, split, images, num_files):
    """The images dealt round-robin to `num_files` shards (default: about
    IMAGES_PER_SHARD each)."""
    count = min(num_files or -(-len(images) // IMAGES_PER_SHARD), len(images))
    return [
        (images[index::count], os.path.join(output_dir, shard_name(split, index, count)))
        for index in range(count)
    ]


def write_image_shard(images, target):
    with tf.io.TFRecordWriter(target) as writer:
        for path, label in images:
            try:
                image = tf.io.decode_image(
                    tf.io.read_file(path), channels=3, expand_animations=False
                )
            except tf.errors.InvalidArgumentError:
                raise ConversionError(
                    f"{path} does not decode as an image - re-encode it or remove it"
                ) from None
            writer.write(encode(image.numpy(), label))
{%- else %}


def import_csv(output_dir, train_files, eval_files, label_column="label", workers=None):
    """One shard per CSV file of `train_files` and `eval_files`, in `output_dir`,
    indexed; returns the manifest's splits."""
    if not train_files or not eval_files:
        raise ConversionError("give at least one training and one evaluation CSV file")
    for path in [*train_files, *eval_files]:  # every header, before any shard is written
        with open_csv(path) as handle:
            header_label_index(path, next(csv.reader(handle), None), label_column)
    check_output_dir(output_dir)
    jobs = [
        ((path, label_column), os.path.join(output_dir, shard_name(split, index, len(files))))
        for split, files in (("train", train_files), ("eval", eval_files))
        for index, path in enumerate(files)
    ]
    convert(jobs, write_csv_shard, workers)
    return manifest.index(output_dir)


def open_csv(path):
    try:
        return open(path, newline="", encoding="utf-8")  # noqa: SIM115 (the caller closes it)
    except OSError as err:
        raise ConversionError(f"cannot read {path}: {err.strerror} - check the path") from None


def write_csv_shard(source, target):
    path, label_column = source
    with open_csv(path) as handle, tf.io.TFRecordWriter(target) as writer:
        rows = csv.reader(handle)
        header = next(rows, None)
        label_at = header_label_index(path, header, label_column)
        for line, row in enumerate(rows, start=2):
            writer.write(encode(*example_of(path, line, header, row, label_at)))


def header_label_index(path, header, label_column):
    if not header:
        raise ConversionError(f"{path} is empty - it needs a header row and examples")
    if label_column not in header:
        raise ConversionError(
            f"{path} has no column {label_column!r} (its columns: {', '.join(header[:8])}"
            f"{', ...' if len(header) > 8 else ''}) - pass --label-column"
        )
    if [len(header) - 1] != list(INPUT_SHAPE):
        raise ConversionError(
            f"{path} has {len(header) - 1} feature columns, the task takes {list(INPUT_SHAPE)}"
            " - change NUM_FEATURES in task.py, or drop columns"
        )
    return header.index(label_column)


def example_of(path, line, header, row, label_at):
    """(features, label) of one CSV row, or a one-line error naming its line."""
    if len(row) != len(header):
        raise ConversionError(
            f"{path} line {line} has {len(row)} fields, the header {len(header)} - fix that row"
        )
    values = []
    for column, text in zip(header, row, strict=True):
        try:
            values.append(float(text))
        except ValueError:
            raise ConversionError(
                f"{path} line {line}: {text!r} in column {column!r} is not a number - fix that row"
            ) from None
    label = values.pop(label_at)
    if label != int(label) or not 0 <= label < NUM_CLASSES:
        raise ConversionError(
            f"{path} line {line}: label {row[label_at]!r} is not a class in"
            f" 0..{NUM_CLASSES - 1} - fix that row, or NUM_CLASSES in task.py"
        )
    return np.array(values, np.float32), int(label)
{%- endif %}
