"""Statistics learned from the training data, built into the model.

The task says what they are: `task.summarize_batch` gives sums over a batch of
model inputs (as evaluation prepares them) and `task.statistics_from` turns the
sums over the whole training split into what `task.build_model` takes (the
sample tasks: the mean and variance a Normalization layer standardizes with).
They are computed once: by `index`, which reads every record anyway{% if cookiecutter.data_source == "synthetic" %} (TFRecord
data), or from the arrays in memory before step 1{% endif %}. The run stores the
statistics it started with in its model directory, beside its checkpoints, so a
resumed run, evaluation and export build the same model whatever happens to the
data afterwards. A run that starts fresh (no checkpoints) takes the data's, even
where an earlier run left its own: those belong to checkpoints that are gone,
perhaps of data since re-indexed.
"""

import collections
import json
import logging
import math
import os

import numpy as np
import tensorflow as tf

from {{ cookiecutter.package_name }} import TrainerError, first_line, task, write_atomically

log = logging.getLogger(__name__)

STATISTICS_NAME = "statistics.json"
# The values a count keeps (a string column's, to learn a vocabulary from): the
# most frequent, pruned to these whenever twice as many are counted, so that a
# column of IDs over hundreds of GB cannot fill the memory. Exact up to twice
# as many distinct values; beyond, a value pruned early and frequent later is
# counted from then on only. (The Misra-Gries step, which bounds that loss,
# kept a far worse vocabulary on long-tailed data: 57% of the 1,000 most
# frequent of 2M Zipf-distributed values, against 85% for this.)
MAX_COUNTED_VALUES = 100_000


class StatisticsError(TrainerError):
    pass


def add_all(sums):
    """Sums of task.summarize_batch added key by key, in the order given: arrays
    (float64: exact for counts), and counts of values ({value: count}: a string
    column's, to learn its vocabulary from). None: nothing to add."""
    total = None
    for each in sums:
        each = {key: as_sum(value) for key, value in each.items()}
        total = each if total is None else {key: add(total[key], each[key]) for key in total}
    return total


def as_sum(value):
    return collections.Counter(value) if isinstance(value, dict) else np.asarray(value, np.float64)


def add(total, more):
    if isinstance(total, collections.Counter):
        total.update(more)
        if len(total) > 2 * MAX_COUNTED_VALUES:
            # Ties in value order: the same data keeps the same values.
            kept = sorted(total.items(), key=lambda item: (-item[1], item[0]))
            total = collections.Counter(dict(kept[:MAX_COUNTED_VALUES]))
        return total
    return total + more


def summarize(batches):
    """The sums over (inputs, labels) batches of model inputs (a dict of inputs:
    a dict of numpy arrays)."""
    return add_all(
        task.summarize_batch(tf.nest.map_structure(np.asarray, inputs), np.asarray(labels))
        for inputs, labels in batches
    )


def for_run(model_dir, train, resuming):
    """The statistics this run builds its model with: those stored in `model_dir`
    by the run whose checkpoints it resumes from (`resuming`), or else the
    training source's."""
    path = os.path.join(model_dir, STATISTICS_NAME)
    if tf.io.gfile.exists(path):
        if resuming:
            return load(model_dir)
        log.info(
            "%s is an earlier run's, whose checkpoints are gone: this run takes the"
            " training data's statistics",
            path,
        )
    return check_finite(
        train.statistics(),
        "the training data's statistics",
        "find the values that are not finite in the training data and fix them",
    )


def keep(model_dir, statistics):
    """Store the statistics the run builds its model with in `model_dir` (the
    chief does, once the model is built): its later starts and export build
    with them."""
    save(os.path.join(model_dir, STATISTICS_NAME), statistics)


def check_finite(statistics, where, fix):
    """`statistics`, refused in one line (`where` they are, and the `fix`) when a
    number in them is not finite (a NaN or infinite value in the data): a model
    normalized with a NaN trains on NaN, and its loss, not the data, is blamed."""
    for key, value in statistics.items():
        numbers = np.asarray(value, dtype=object).ravel()
        bad = [x for x in numbers if isinstance(x, float) and not math.isfinite(x)]
        if bad:
            raise StatisticsError(
                f"{where} hold {bad[0]} in {key!r}: a value in the training data is not"
                f" finite - {fix}"
            )
    return statistics


def save(path, statistics):
    """`statistics` as JSON at `path`, written whole or not at all."""
    try:
        text = json.dumps(statistics, indent=1)
    except TypeError as err:
        raise StatisticsError(
            f"task.statistics_from returned what JSON cannot hold ({err}) - return"
            " lists, numbers and strings (numpy: .tolist())"
        ) from None
    write_atomically(path, text + "\n")


def load(model_dir):
    """The statistics a run in `model_dir` trained with."""
    path = os.path.join(model_dir, STATISTICS_NAME)
    if not tf.io.gfile.exists(path):
        raise StatisticsError(
            f"{model_dir} has no {STATISTICS_NAME} (the training data's statistics the"
            " model is built with) - pass the --model-dir of a `train` run, or run"
            " `train` again with it to write them"
        )
    try:
        with tf.io.gfile.GFile(path) as handle:
            return check_finite(
                json.load(handle),
                path,
                "train in a new --model-dir, from data whose values are all finite",
            )
    except json.JSONDecodeError as err:
        raise StatisticsError(
            f"{path} is not JSON ({first_line(err)}) - restore it, or train in a new --model-dir"
        ) from None
