"""A worked example of `task.py` for a regression: a float target from feature
vectors, as a CSV of numbers gives it.

Copy it over `src/{{ cookiecutter.package_name }}/task.py` and the project trains it: the
framework and the project's equivalence, resume, evaluation and export tests
run unchanged (the template's own tests do exactly that), and `import-csv`
takes a CSV whose `--label-column` holds the target. What differs from the
sample classifier: a float32 label, a mean squared error loss, the mean
absolute error as the metric (lower is better), one output the model
un-standardizes with the training target's mean and standard deviation (from
its statistics, as the features' own), dropout, `check_labels` refusing a
target that is not finite, and a `prediction` from the exported model.
"""

import numpy as np

from {{ cookiecutter.package_name }}.distribute.compat import keras
from {{ cookiecutter.package_name }}.toolkit import features, heads, moments

NUM_FEATURES = 8
# A regression's loss, metric and exported output (toolkit/heads.py): the squared error,
# the absolute error (lower is better), and the prediction.
METRIC_NAME, per_example_loss, per_example_metric, serving_outputs = heads.regression()
# Dropout after each hidden layer: it draws random numbers at every training step.
DROPOUT_RATE = 0.1
# The sample task is fixed (its own seed); --seed changes shuffling and init.
SAMPLE_TASK_SEED = 2024
# One record: a vector of features, the model's input (and what a client sends
# the exported model), and the target, a float.
FEATURES = features.Record(
    {
        "features": features.Tensor(shape=(NUM_FEATURES,), dtype="float32"),
        "target": features.Tensor(shape=(), dtype="float32"),
    },
    label="target",
)


def build_model(statistics):
    """A small MLP with dropout, of features standardized with the training data's
    mean and variance, predicting the standardized target: its one output is
    scaled back by the training target's standard deviation and mean."""
    inputs = keras.Input(shape=(NUM_FEATURES,), name="features")
    x = moments.normalization(statistics)(inputs)
    for width in (64, 64):
        x = keras.layers.Dense(width, activation="relu")(x)
        x = keras.layers.Dropout(DROPOUT_RATE)(x)
    # float32 outputs keep the loss exact under mixed precision.
    x = keras.layers.Dense(1, dtype="float32")(x)
    outputs = keras.layers.Rescaling(
        statistics["target_std"], offset=statistics["target_mean"], dtype="float32", name="target"
    )(x)
    return keras.Model(inputs, outputs, name="regressor")
{%- if cookiecutter.data_source == "tfrecord" %}


def check_labels(low, high):
    """Why targets from `low` to `high` cannot train, or None: each must be finite
    (one NaN makes every loss after it NaN)."""
    for target in (low, high):
        if not np.isfinite(target):
            return f"target {target} is not finite - fix or drop that example"
    return None
{%- endif %}


def summarize_batch(features, targets):
    """Per-feature and target sums over a batch (numpy), added up over the
    training data."""
    return {**moments.column_sums(features), **moments.column_sums(targets, prefix="target_")}


def statistics_from(sums):
    """The training data's per-feature mean and variance, and its target's mean
    and standard deviation, for build_model."""
    mean, variance = moments.mean_and_variance(sums)
    target_mean, target_variance = moments.mean_and_variance(sums, prefix="target_")
    return {
        "mean": mean.tolist(),
        "variance": variance.tolist(),
        "target_mean": float(target_mean),
        # A constant target would scale every prediction to it: 1 keeps it learnable.
        "target_std": float(np.sqrt(target_variance)) if target_variance > 0 else 1.0,
    }


def sample_examples(num_examples, seed):
    """A seeded regression a small MLP learns: a fixed random two-layer teacher
    of the features, plus noise, far from zero (mean 50, standard deviation
    about 1.2). `seed` picks the examples; the task is fixed."""
    teacher = np.random.default_rng(SAMPLE_TASK_SEED)
    hidden_weights = teacher.normal(size=(NUM_FEATURES, 16))
    output_weights = teacher.normal(size=16)
    rng = np.random.default_rng([SAMPLE_TASK_SEED, seed])
    features = rng.normal(size=(num_examples, NUM_FEATURES))
    signal = np.tanh(features @ hidden_weights) @ output_weights
    targets = 50 + 0.4 * signal + rng.normal(scale=0.3, size=num_examples)
    return features.astype("float32"), targets.astype("float32")


def prepare_batch(features, keys=None):
    """Feature vectors are model inputs as they are (no augmentation: `keys` unused)."""
    del keys
    return features
