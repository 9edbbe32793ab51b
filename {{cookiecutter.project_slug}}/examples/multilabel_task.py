"""A worked example of `task.py` for a multi-label problem: each example has any
number of NUM_LABELS tags, a 0/1 vector as its label.

Copy it over `src/{{ cookiecutter.package_name }}/task.py` and the project trains it: the
framework and the project's equivalence, resume, evaluation and export tests
run unchanged (the template's own tests do exactly that). What differs from the
sample classifier: a label of shape (NUM_LABELS,) (in FEATURES), a sigmoid
cross-entropy per tag, the share of tags predicted right as the metric, the
logits' biases starting at each tag's log-odds in the training data (its
statistics), `check_labels` refusing a value other than 0 or 1, and per-tag
`probabilities` from the exported model.
"""

import numpy as np

from {{ cookiecutter.package_name }}.distribute.compat import keras
from {{ cookiecutter.package_name }}.toolkit import features, heads, moments

NUM_FEATURES = 20
NUM_LABELS = 5
# A multi-label problem's loss, metric and exported outputs (toolkit/heads.py): the
# sigmoid cross-entropy averaged over the tags, the share of tags right, and
# each tag's logit and probability.
METRIC_NAME, per_example_loss, per_example_metric, serving_outputs = heads.multi_label(NUM_LABELS)
# The sample task is fixed (its own seed); --seed changes shuffling and init.
SAMPLE_TASK_SEED = 77
# One record: a vector of features, the model's input (and what a client sends
# the exported model), and the tags, a 0/1 value per tag (in a CSV, one column
# of NUM_LABELS values separated by spaces: "0 1 1 0 0").
FEATURES = features.Record(
    {
        "features": features.Tensor(shape=(NUM_FEATURES,), dtype="float32"),
        "tags": features.Tensor(shape=(NUM_LABELS,), dtype="int32"),
    },
    label="tags",
)


def build_model(statistics):
    """A small MLP returning a logit per tag, of features standardized with the
    training data's mean and variance; the logits' biases start at each tag's
    log-odds in the training data."""
    inputs = keras.Input(shape=(NUM_FEATURES,), name="features")
    x = moments.normalization(statistics)(inputs)
    for width in (64, 64):
        x = keras.layers.Dense(width, activation="relu")(x)
    # float32 logits keep the sigmoid and the loss stable under mixed precision.
    outputs = keras.layers.Dense(
        NUM_LABELS,
        dtype="float32",
        bias_initializer=keras.initializers.Constant(statistics["log_odds"]),
        name="logits",
    )(x)
    return keras.Model(inputs, outputs, name="tagger")
{%- if cookiecutter.data_source == "tfrecord" %}


def check_labels(low, high):
    """Why tag values from `low` to `high` cannot train, or None: each is 0 or 1."""
    for value in (low, high):
        if value not in (0, 1):
            return f"tag value {value:g} is not 0 or 1 - fix the labels"
    return None
{%- endif %}


def summarize_batch(features, labels):
    """Per-feature sums and tag counts over a batch (numpy), added up over the
    training data."""
    return {**moments.column_sums(features), "tag_counts": labels.sum(axis=0)}


def statistics_from(sums):
    """The training data's per-feature mean and variance, and each tag's
    log-odds (a tag never or always seen: half an example's worth either way)."""
    mean, variance = moments.mean_and_variance(sums)
    count = sums["count"]
    positive = np.clip(sums["tag_counts"], 0.5, count - 0.5)
    return {
        "mean": mean.tolist(),
        "variance": variance.tolist(),
        "log_odds": np.log(positive / (count - positive)).tolist(),
    }


def sample_examples(num_examples, seed):
    """Seeded feature vectors tagged by a fixed random two-layer teacher: a tag is
    on where its teacher logit is above a threshold that makes tags common or
    rare. `seed` picks the examples; the task is fixed."""
    teacher = np.random.default_rng(SAMPLE_TASK_SEED)
    hidden_weights = teacher.normal(size=(NUM_FEATURES, 32))
    output_weights = teacher.normal(size=(32, NUM_LABELS))
    thresholds = np.linspace(-5.0, 5.0, NUM_LABELS)
    features = np.random.default_rng([SAMPLE_TASK_SEED, seed]).normal(
        size=(num_examples, NUM_FEATURES)
    )
    scores = np.tanh(features @ hidden_weights) @ output_weights
    return features.astype("float32"), (scores > thresholds).astype("int32")


def prepare_batch(features, keys=None):
    """Feature vectors are model inputs as they are (no augmentation: `keys` unused)."""
    del keys
    return features
