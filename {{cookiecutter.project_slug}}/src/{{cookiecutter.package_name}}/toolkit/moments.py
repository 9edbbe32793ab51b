"""A column's mean and variance over the training data, as a task learns them
for a Normalization layer: its summarize_batch returns `column_sums(batch)`, the
framework adds them up over the training split (data/statistics.py), its
statistics_from takes `mean_and_variance(sums)`, and its model standardizes
with `normalization(statistics)`. Keys may carry a prefix, for several columns
in one task's sums (a regression's features and target)."""

import numpy as np

from {{ cookiecutter.package_name }}.distribute.compat import keras


def column_sums(values, prefix=""):
    """The count, sum and sum of squares of each column of a batch (numpy, one
    row an example; a scalar a row: one column), in float64."""
    values = np.asarray(values, np.float64)
    return {
        f"{prefix}count": len(values),
        f"{prefix}sum": values.sum(axis=0),
        f"{prefix}sum_of_squares": np.square(values).sum(axis=0),
    }


def mean_and_variance(sums, prefix=""):
    """Each column's mean and variance (numpy), from its sums over the training
    data; a variance that rounding took below 0 is 0."""
    count = sums[f"{prefix}count"]
    mean = sums[f"{prefix}sum"] / count
    return mean, np.maximum(sums[f"{prefix}sum_of_squares"] / count - np.square(mean), 0.0)


def normalization(statistics):
    """A Normalization layer of statistics_from's "mean" and "variance", in
    float32: a raw value over 256 (a variance over 65,504) overflows float16
    under mixed precision."""
    return keras.layers.Normalization(
        mean=statistics["mean"], variance=statistics["variance"], dtype="float32"
    )
