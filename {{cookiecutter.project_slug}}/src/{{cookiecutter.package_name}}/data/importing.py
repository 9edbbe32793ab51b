{%- if cookiecutter.task == "image" -%}
"""Images as they come: a class-per-folder tree (the `image_dataset_from_directory`
layout: one folder per class, classes in name order) -> shards in the task's
record format (data/record_format.py), and their manifest.

The files are shuffled (seeded) before they are dealt to the shards, so every
shard holds every class. Each shard is written by its own process, --workers at
a time, under a hidden name, and all are renamed once every one is done: a file
that does not decode is named in one line as soon as it is found (the shards not
yet started are not written), and no shard is left behind.
{%- else -%}
"""CSV files as they come -> shards in the task's record format (data/record_format.py),
and their manifest.

A header row names the columns: `--label-column` holds the label, and
the task's FEATURES make each row's columns into its example (the
sample task: every other column a number, a feature, in header order); a
number that is not finite, a row the task does not take and a label that
the task's label check refuses are named with their file and line. The rows
are shuffled (seeded) and dealt into shards (import_csv), each written by its
own process, --workers at a time, under a hidden name; all are renamed once
every one is done: a bad row is named in one line and no shard is left behind.
Split a large file into parts (`split -l`, each part with the header) to read
it in parallel.
{%- endif %}
"""

import concurrent.futures
{%- if cookiecutter.task == "tabular" %}
import csv
import io
{%- endif %}
import multiprocessing
import os
{%- if cookiecutter.task == "tabular" %}
import resource
{%- endif %}
{%- if cookiecutter.task == "image" %}
import random
{%- endif %}

{% if cookiecutter.task == "tabular" %}import numpy as np
{% endif %}import tensorflow as tf

from {{ cookiecutter.package_name }} import TrainerError
from {{ cookiecutter.package_name }}.data import manifest
{%- if cookiecutter.task == "image" %}
from {{ cookiecutter.package_name }}.data.record_format import FEATURES, encode
{%- else %}
from {{ cookiecutter.package_name }}.data.record_format import (
    LABEL_COLUMN,
    check_labels,
    encode,
    example_from_csv,
)
{%- endif %}
from {{ cookiecutter.package_name }}.data.tfrecords import shard_name
from {{ cookiecutter.package_name }}.distribute.startup import start_conversion_process
from {{ cookiecutter.package_name }}.progress import Progress
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


def convert(jobs, write_shard, workers, what="writing"):
    """Run write_shard(sources, target) for each (sources, target) of `jobs` in
    its own process, `workers` at a time (1: one after the other, in this
    process), its progress shown as `what`; rename the shards into place when
    all are written, or remove them all and raise the first error."""
    partials = [
        os.path.join(os.path.dirname(target), f".partial-{os.path.basename(target)}")
        for _, target in jobs
    ]
    try:
        sources = [sources for sources, _ in jobs]
        run_all(write_shard, list(zip(sources, partials, strict=True)), workers, what, "shards")
    except BaseException:
        for partial in partials:
            if tf.io.gfile.exists(partial):
                tf.io.gfile.remove(partial)
        raise
    for partial, (_, target) in zip(partials, jobs, strict=True):
        tf.io.gfile.rename(partial, target)


def run_all(write, jobs, workers, what, unit):
    """write(source, target) for each (source, target) of `jobs`, `workers` at a
    time in processes of their own (1: one after the other, in this process),
    its progress shown as `what`, in `unit`s (progress.py)."""
    with Progress(what, len(jobs), unit) as progress:
        if workers == 1:
            for done, (source, target) in enumerate(jobs, 1):
                write(source, target)
                progress.update(done)
        else:
            write_in_processes(write, jobs, workers, progress.update)


def write_in_processes(write, jobs, workers, on_done):
    """write(source, target) for each job, in `workers` processes, calling
    on_done(count) as each ends; the first failure cancels the jobs not yet
    started (on ImageNet, hours of shards) and is raised once the running ones
    end."""
    # spawn, not fork: a forked copy of a process running TensorFlow's threads can hang.
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(
        workers, mp_context=context, initializer=start_conversion_process
    ) as pool:
        written = [pool.submit(write, *job) for job in jobs]
        try:
            for done, future in enumerate(concurrent.futures.as_completed(written), 1):
                future.result()
                on_done(done)
        except BaseException:
            pool.shutdown(cancel_futures=True)
            raise
{% include "data/importing/" ~ cookiecutter.task ~ ".py" %}