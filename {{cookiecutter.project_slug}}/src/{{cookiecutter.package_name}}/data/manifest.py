"""The data directory's manifest: every shard with its size, its record count and
what its records hold.

`index` (and `make-data`, after writing) reads every record once, files in
parallel, and writes `manifest.json` next to the shards, with the training
data's statistics (data/statistics.py; a second read of the training files). `train` and `doctor`
plan from the manifest and only check that each listed file is there with its
recorded size, so start-up does not grow with the data: counting 150 GB of
shards before step 1, again after every preemption, would take hours.

Files are reached through tf.io.gfile: the data directory may be any path
TensorFlow reads (a local directory, gs://...).
"""

import collections
import concurrent.futures
import dataclasses
import json
import logging
import os
import re

import numpy as np
import tensorflow as tf

from {{ cookiecutter.package_name }} import TrainerError, TransientError, first_line, write_atomically
from {{ cookiecutter.package_name }}.data import statistics
from {{ cookiecutter.package_name }}.data.record_format import (
    FORMAT,
{%- if cookiecutter.task == "tabular" %}
    INPUT_VALUES,
{%- endif %}
    LABEL_SHAPE,
    check_labels,
    describe_batch,
    parse_batch,
)
from {{ cookiecutter.package_name }}.progress import Progress
from {{ cookiecutter.package_name }}.task import statistics_from

log = logging.getLogger(__name__)

MANIFEST_NAME = "manifest.json"
SPLITS = ("train", "eval")
# The names each split's shards may have (globs in the data directory): this
# project's own, and those tensorflow/models' ImageNet converter writes
# (train-00000-of-01024, validation-00000-of-00128), which train as they are.
# `index --train-files/--eval-files` takes others; the manifest keeps them.
SHARD_PATTERNS = {
    "train": ("train-*.tfrecord", "train-?????-of-?????"),
    "eval": ("eval-*.tfrecord", "validation-?????-of-?????"),
}
VERSION = 3
# Files read at once by `index` and the checks: enough to keep a network file system busy.
READ_THREADS = 16
INDEX_BATCH = 1024
INDEX_COMMAND = "{{ cookiecutter.project_slug }} index --data-dir"
# Values in one example's label.
LABEL_VALUES = int(np.prod(LABEL_SHAPE))


class ManifestError(TrainerError):
    pass


class DataUnavailable(TransientError):
    """The data's storage did not answer this time."""


@dataclasses.dataclass(frozen=True)
class Shard:
    """One file, as `index` found it."""

    path: str
    bytes: int
    records: int
    feature_shape: tuple[int, ...]
    # The smallest and largest label value (an int for integer labels).
    label_min: float
    label_max: float


def check_data_dir(data_dir):
    # Not tf.io.gfile.isdir: it answers False for any error, and storage that did
    # not answer this time would read as "does not exist" (exit 2, for good).
    try:
        is_directory = tf.io.gfile.stat(data_dir).is_directory
    except tf.errors.NotFoundError:
        is_directory = False
    except (tf.errors.UnavailableError, tf.errors.DeadlineExceededError) as err:
        # Retryable; not a raw UnavailableError, which reads as a lost peer's.
        raise DataUnavailable(
            f"the storage of the data directory {data_dir} did not answer"
            f" ({first_line(err, 200)}) - restarting the job tries again"
        ) from None
    except tf.errors.OpError as err:
        raise ManifestError(
            f"cannot read the data directory {data_dir} ({type(err).__name__}:"
            f" {first_line(err, 200)}) - check its path and this user's access, or pass"
            " another --data-dir"
        ) from None
    if not is_directory:
        raise ManifestError(
            f"data directory {data_dir} does not exist - create it with"
            f" `{{ cookiecutter.project_slug }} make-data --output-dir {data_dir}` or pass --data-dir"
        )


def shard_paths(data_dir, patterns):
    """The files of `data_dir` that match any of `patterns`, in name order."""
    found = set()
    for pattern in patterns:
        found.update(tf.io.gfile.glob(os.path.join(data_dir, pattern)))
    return sorted(found)


def index(data_dir, threads=READ_THREADS, patterns=None):
    """Read every shard of `data_dir` once, `threads` files at a time, and write
    its manifest; returns {split: [Shard]}. `patterns`: {split: globs}, by
    default SHARD_PATTERNS."""
    patterns = {**SHARD_PATTERNS, **(patterns or {})}
    check_data_dir(data_dir)
    splits = {}
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        for split in SPLITS:
            paths = shard_paths(data_dir, patterns[split])
            if not paths:
                raise ManifestError(
                    f"no {split} shards in {data_dir} (files named"
                    f" {' or '.join(patterns[split])}) - name them so, pass"
                    f" --{split}-files with their pattern, or create a sample data set with"
                    f" `{{ cookiecutter.project_slug }} make-data --output-dir {data_dir}`"
                )
            with Progress(f"index: reading the {split} files", len(paths), "files") as progress:
                indexed = list(progress.counted(pool.map(index_file, paths)))
            splits[split] = [shard for shard, _ in indexed]
            if split == "train":
                ordered = [shard.path for shard, first in indexed if in_label_order(first)]
        learned = training_statistics(pool, threads, [shard.path for shard in splits["train"]])
    manifest = {
        "version": VERSION,
        "format": FORMAT,
        "statistics": learned,
        "splits": {
            split: {
                "patterns": list(patterns[split]),
                "records": sum(shard.records for shard in shards),
                "files": [manifest_entry(shard) for shard in shards],
            }
            for split, shards in splits.items()
        },
    }
    write_manifest(os.path.join(data_dir, MANIFEST_NAME), json.dumps(manifest, indent=1))
    ranges = [(shard.label_min, shard.label_max) for shard in splits["train"]]
    if sorted_by_label(ranges):
        log.warning(
            "the %d training shards look sorted by label (most hold at most half of labels"
            " %s..%s): training shuffles only within a window of the records (a few files"
            " at a time, a shuffle buffer of bounded size), so its batches would hold few"
            " classes - re-shard with the records shuffled, then re-run index",
            len(ranges),
            min(low for low, _ in ranges),
            max(high for _, high in ranges),
        )
    elif ordered:
        log.warning(
            "%d of the %d training shards hold their records in label order (%s%s: their"
            " first records follow the order of their labels): training shuffles only within a"
            " window of the records, so its batches would hold few classes - re-shard"
            " with the records shuffled (import-csv and import-images do), then re-run"
            " index",
            len(ordered),
            len(ranges),
            os.path.basename(ordered[0]),
            ", ..." if len(ordered) > 1 else "",
        )
    return splits


def sorted_by_label(ranges):
    """Whether shards with these (label_min, label_max) look written in label order,
    from at least 4 of them. Integer labels (classes): most span at most half of
    the labels they span together (shuffled shards of more than a few records
    each span nearly all of them; in label order only the shards across a class
    boundary span more than one). Other labels (a regression target): most
    shards, in the order of their smallest label, end where the next begins
    (shuffled shards overlap, whatever the target's distribution)."""
    if len(ranges) < 4:
        return False
    if all(isinstance(value, int) for pair in ranges for value in pair):
        labels = max(high for _, high in ranges) - min(low for low, _ in ranges) + 1
        narrow = sum(2 * (high - low + 1) <= labels for low, high in ranges)
        return 2 * narrow > len(ranges)
    ordered = sorted(ranges)
    # A target that is mostly one value (0.0) gives shards of that value alone,
    # in any order: neighbours that are both that one value tell nothing, and a
    # next shard that starts where this one does is not apart.
    pairs = [
        (shard, following)
        for shard, following in zip(ordered[:-1], ordered[1:], strict=True)
        if not (shard == following and shard[0] == shard[1])
    ]
    apart = sum(high <= following[0] and low < following[0] for (low, high), following in pairs)
    return 2 * apart > len(pairs)


def in_label_order(labels):
    """Whether these labels (a shard's first records, in order; one row each)
    follow their order. Classes: by their runs (below). Other labels (a target,
    label vectors): neighbours' ranks among the distinct labels differ by
    less than a quarter of what the same labels shuffled (a seeded order) give,
    when those differences add up to at least 8 (a single label, or a handful of
    records, cannot tell). Runs of one class and a sorted regression target
    both show; labels in random order do not."""
    labels = np.asarray(labels).reshape(len(labels), -1)
    if len(labels) < 2:
        return False
    if labels.shape[1] == 1 and labels.dtype.kind in "iu":
        # Classes: their ranks mean nothing (classes written round-robin step one
        # rank a record): runs of one class, fewer than a quarter of the label
        # changes a shuffled order gives, (n - 1) * (1 - sum of squared shares).
        classes = labels[:, 0]
        _, counts = np.unique(classes, return_counts=True)
        expected = (len(classes) - 1) * (1 - np.sum((counts / len(classes)) ** 2))
        changes = np.count_nonzero(classes[1:] != classes[:-1])
        return bool(expected >= 8 and 4 * changes < expected)
    _, ranks = np.unique(labels, axis=0, return_inverse=True)
    ranks = ranks.reshape(-1)
    steps = np.abs(np.diff(ranks)).sum()
    shuffled = np.abs(np.diff(np.random.default_rng(0).permutation(ranks))).sum()
    return bool(shuffled >= 8 and 4 * steps < shuffled)


def index_file(path):
    """Read one file whole: (its Shard: records, feature length and label range;
    the labels of its first batch of records, in order)."""
    size = tf.io.gfile.stat(path).length
    if size == 0:
        raise ManifestError(f"{path} is empty - regenerate or remove it")
    records, shapes, label_min, label_max, first = 0, set(), None, None, None
    try:
        for record_shapes, label_counts, labels in described_batches(path):
            records += int(tf.size(label_counts))
            shapes.update(map(tuple, np.unique(record_shapes.numpy(), axis=0).tolist()))
            wrong = sorted(set(np.unique(label_counts.numpy()).tolist()) - {LABEL_VALUES})
            if wrong:
                raise ManifestError(
                    f"{path} has a record with {wrong[0]} label values, the task takes"
                    f" {LABEL_VALUES} (a label of shape {list(LABEL_SHAPE)}, task.py) - fix the"
                    " data, or the label's shape in task.py"
                )
            labels = labels.numpy().reshape(-1, *LABEL_SHAPE)
            first = labels if first is None else first
            # .item(): a Python int for integer labels, a float for others.
            low, high = labels.min().item(), labels.max().item()
            label_min = low if label_min is None else min(label_min, low)
            label_max = high if label_max is None else max(label_max, high)
    except tf.errors.DataLossError as err:
        raise ManifestError(
            f"{path} is corrupt ({data_loss_reason(err)}) - regenerate or remove it"
        ) from None
    except tf.errors.InvalidArgumentError:
        # The batches before the failed one were counted: it starts at `records`.
        raise unreadable(path, records) from None
    shard = Shard(path, size, records, feature_shape_of(path, shapes), label_min, label_max)
    return shard, first


def training_statistics(pool, threads, paths):
    """task.statistics_from over the training files, or None (with a warning) when
    their records do not parse as the model takes them: `load` then names why."""
    try:
        with Progress("index: the training data's statistics", len(paths), "files") as progress:
            # Added in file order (the same data gives the same float sums), each
            # file's as it comes: not every file's value counts held at once.
            sums = in_order(pool, 2 * threads, summarize_file, paths)
            learned = statistics_from(statistics.add_all(progress.counted(sums)))
    except tf.errors.InvalidArgumentError as err:
        log.warning(
            "no statistics of the training data: its records do not parse as the model"
            " takes them (%s)",
            first_line(err, 160),
        )
        return None
    return statistics.check_finite(
        learned,
        "the statistics of the training files",
        "find the values that are not finite in the training files (import-csv names"
        " each), fix them and run index again",
    )


def in_order(pool, ahead, function, items):
    """function(item) for each of `items`, in order, run in `pool` at most `ahead`
    items beyond the one taken: pool.map would run them all at once and hold every
    result (a file's value counts) until its turn, thousands of files' worth."""
    running = collections.deque()
    for item in items:
        running.append(pool.submit(function, item))
        if len(running) > ahead:
            yield running.popleft().result()
    while running:
        yield running.popleft().result()


def summarize_file(path):
    """task.summarize_batch summed over `path`'s records, parsed as evaluation parses them."""
    batches = (
        tf.data.TFRecordDataset(path)
        .batch(INDEX_BATCH)
        .map(parse_batch, num_parallel_calls=tf.data.AUTOTUNE)
        .prefetch(2)
    )
    return statistics.summarize(batches)


def described_batches(path):
    """`path`'s records described a batch at a time, in order: what `index` and the
    search for a bad file after a failed training step both read. Batches in
    parallel: describing them (the task's describe_batch) is the work."""
    return (
        tf.data.TFRecordDataset(path)
        .batch(INDEX_BATCH)
        .map(describe_batch, num_parallel_calls=tf.data.AUTOTUNE)
        .prefetch(2)
    )


def data_loss_reason(err):
    """'corrupted record at 474' out of TensorFlow's DataLossError message."""
    found = re.search(r"corrupted record at \d+", str(err))
    return found.group(0) if found else first_line(err)


def manifest_entry(shard):
    """A shard as the manifest lists it: by file name, relative to the data directory."""
    entry = dataclasses.asdict(shard)
    del entry["path"]
    entry["feature_shape"] = list(shard.feature_shape)
    return {"file": os.path.basename(shard.path), **entry}


def not_of_the_format(path):
    return ManifestError(
        f"{path} does not hold records of the format {FORMAT!r} - write them in the task's"
        " format (`make-data`, `import-csv`, or tfrecords.write_split)"
    )


def write_manifest(path, text):
    """Whole or not at all: a reader (another worker starting) never sees half a manifest."""
    try:
        write_atomically(path, text + "\n")
    except tf.errors.OpError as err:
        raise ManifestError(
            f"cannot write {path} ({first_line(err)}) - make {os.path.dirname(path)}"
            " writable, or index a writable copy of the shards"
        ) from None


def load(data_dir, label_offset=0):
    """The shards of each split, from the manifest, checked without reading a record:
    every file listed and present at its recorded size, no shard left unlisted, what
    each holds fit for the model, and labels (minus `label_offset`) that
    the task's label check takes. Returns ({split: [Shard]}, the training data's statistics)."""
    check_data_dir(data_dir)
    splits, patterns, learned = read_manifest(data_dir)
    with concurrent.futures.ThreadPoolExecutor(READ_THREADS) as pool:
        for split, shards in splits.items():
            check_listing(data_dir, split, shards, patterns[split])
            list(pool.map(check_size, shards))
            for shard in shards:
                check_shard(shard, label_offset)
    if learned is None:
        raise ManifestError(
            f"{MANIFEST_NAME} in {data_dir} has no statistics of the training data (index"
            " could not parse its records in the task's format) - fix the data or task.py,"
            f" then run `{INDEX_COMMAND} {data_dir}`"
        )
    return splits, learned


def read_manifest(data_dir):
    """({split: [Shard]}, {split: the file name patterns index listed}, the
    training data's statistics)."""
    path = os.path.join(data_dir, MANIFEST_NAME)
    again = f"run `{INDEX_COMMAND} {data_dir}`"
    if not tf.io.gfile.exists(path):
        raise ManifestError(
            f"no {MANIFEST_NAME} in {data_dir} - {again} (it reads every shard once and"
            " lists them with their record counts)"
        )
    try:
        with tf.io.gfile.GFile(path) as handle:
            manifest = json.load(handle)
        if manifest["version"] != VERSION or manifest["format"] != FORMAT:
            raise ManifestError(
                f"{path} describes {manifest['format']!r} records (manifest version"
                f" {manifest['version']}), this project reads {FORMAT!r} - {again}"
            )
        splits = {
            split: [
                Shard(
                    path=os.path.join(data_dir, entry["file"]),
                    bytes=int(entry["bytes"]),
                    records=int(entry["records"]),
                    feature_shape=tuple(entry["feature_shape"]),
                    label_min=entry["label_min"],
                    label_max=entry["label_max"],
                )
                for entry in manifest["splits"][split]["files"]
            ]
            for split in SPLITS
        }
        patterns = {split: tuple(manifest["splits"][split]["patterns"]) for split in SPLITS}
        return splits, patterns, manifest["statistics"]
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
        raise ManifestError(
            f"{path} is not a manifest this project can read ({type(err).__name__}:"
            f" {first_line(err)}) - {again}"
        ) from None


def check_listing(data_dir, split, shards, patterns):
    listed = {shard.path for shard in shards}
    on_disk = set(shard_paths(data_dir, patterns))
    again = f"run `{INDEX_COMMAND} {data_dir}`"
    for path in sorted(on_disk - listed)[:1]:
        raise ManifestError(
            f"{path} is not in {MANIFEST_NAME}: it would not be trained on - {again}"
        )
    for path in sorted(listed - on_disk)[:1]:
        raise ManifestError(
            f"{path} is in {MANIFEST_NAME} but missing - restore it, or {again} to list"
            " what is there"
        )
    if not shards:
        raise ManifestError(f"{MANIFEST_NAME} in {data_dir} lists no {split} files - {again}")


def check_size(shard):
    size = tf.io.gfile.stat(shard.path).length
    if size != shard.bytes:
        raise ManifestError(
            f"{shard.path} has {size} bytes, {MANIFEST_NAME} says {shard.bytes}: it changed"
            f" after it was indexed - run `{INDEX_COMMAND} {os.path.dirname(shard.path)}`"
        )


def check_shard_labels(shard, label_offset):
    """A shard's labels, as the task's label check judges them (after `label_offset`)."""
    low, high = shard.label_min - label_offset, shard.label_max - label_offset
    problem = check_labels(low, high)
    if problem is None:
        return
    if label_offset:
        raise ManifestError(f"{shard.path} (--label-offset {label_offset}): {problem}")
    # Labels that one less would make right: stored from 1, as ImageNet's are.
    one_based = check_labels(low - 1, high - 1) is None
    hint = "; labels stored from 1 train with --label-offset 1" if one_based else ""
    raise ManifestError(f"{shard.path}: {problem}{hint}")


def first_corrupt_file(paths, threads=READ_THREADS, on_progress=None):
    """The first of `paths`, in the order given, with a record that fails its
    checksum or that the task's format cannot read; None if all are intact. Reads
    `threads` files at a time and stops at the first group with a corrupt one;
    calls on_progress() after each group read whole."""
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        for start in range(0, len(paths), threads):
            group = paths[start : start + threads]
            for path, intact in zip(group, pool.map(is_intact, group), strict=True):
                if not intact:
                    return path
            if on_progress is not None:
                on_progress()
    return None


def is_intact(path):
    """Whether `path` reads as `index` reads it."""
    try:
        described_batches(path).reduce(0, lambda count, _: count)
    except (tf.errors.DataLossError, tf.errors.InvalidArgumentError):
        return False
    return True
{% include "data/manifest/" ~ cookiecutter.task ~ ".py" %}