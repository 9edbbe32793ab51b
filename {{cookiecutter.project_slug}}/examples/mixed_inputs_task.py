"""A worked example of `task.py` for a model of several inputs: numeric and
string columns of a CSV, as customer tables come.

Copy it over `src/{{ cookiecutter.package_name }}/task.py` and the project trains it: the
framework and the project's equivalence, resume, evaluation and export tests
run unchanged (the template's own tests do exactly that), and `import-csv`
takes its CSV (numeric columns `age`, `income`, `visits`; string columns
`city`, `device`; the class in `--label-column`). What differs from the sample
classifier: inputs are a dict of a numeric vector and two string columns; the
numbers are standardized (`Normalization`) and each string is looked up in a
vocabulary (`StringLookup`, unknown values to one index of their own) and
embedded; the vocabularies are learned from the training split, as the
numbers' mean and variance are (its statistics: `summarize_batch` counts the
values); and the exported model takes the raw values, strings included.
"""

import numpy as np

from {{ cookiecutter.package_name }}.distribute.compat import keras
from {{ cookiecutter.package_name }}.toolkit import features, heads, moments

NUMERIC_COLUMNS = ("age", "income", "visits")
STRING_COLUMNS = ("city", "device")
NUM_CLASSES = 3
# A classifier's head (toolkit/heads.py): cross-entropy over the classes, accuracy.
METRIC_NAME, per_example_loss, per_example_metric, serving_outputs = heads.classification(
    NUM_CLASSES
)
# The most frequent values of a string column kept in its vocabulary; the
# others, and values never seen in training, share one index.
MAX_VOCABULARY = 1000
EMBEDDING_WIDTH = 4
# The sample task is fixed (its own seed); --seed changes shuffling and init.
SAMPLE_TASK_SEED = 31
CITIES = ("Lyon", "Oslo", "Porto", "Kyoto", "Lima", "Accra")
DEVICES = ("phone", "tablet", "desktop")
# One record: the numbers of NUMERIC_COLUMNS, each string column, and the
# class (a CSV's other columns are left out). A client sends the exported
# model the raw values, strings included.
FEATURES = features.Record(
    {
        "numbers": features.Tensor(
            shape=(len(NUMERIC_COLUMNS),), dtype="float32", columns=NUMERIC_COLUMNS
        ),
        **{column: features.Text() for column in STRING_COLUMNS},
        "label": features.ClassLabel(NUM_CLASSES),
    },
    label="label",
)


def build_model(statistics):
    """The numbers standardized with the training data's mean and variance, each
    string column looked up in its training vocabulary and embedded, then a
    small MLP returning logits."""
    inputs = {
        "numbers": keras.Input(shape=(len(NUMERIC_COLUMNS),), name="numbers"),
        **{column: keras.Input(shape=(), dtype="string", name=column) for column in STRING_COLUMNS},
    }
    parts = [moments.normalization(statistics)(inputs["numbers"])]
    for column in STRING_COLUMNS:
        vocabulary = statistics[f"{column}_vocabulary"]
        indices = keras.layers.StringLookup(vocabulary=vocabulary, num_oov_indices=1)(
            inputs[column]
        )
        parts.append(keras.layers.Embedding(len(vocabulary) + 1, EMBEDDING_WIDTH)(indices))
    x = keras.layers.Concatenate()(parts)
    x = keras.layers.Dense(32, activation="relu")(x)
    # float32 logits keep the softmax and the loss stable under mixed precision.
    outputs = keras.layers.Dense(NUM_CLASSES, dtype="float32", name="logits")(x)
    return keras.Model(inputs, outputs, name="customers")


def summarize_batch(inputs, labels):
    """Sums of the numbers and counts of each string column's values over a batch
    (numpy), added up over the training data."""
    del labels
    sums = moments.column_sums(inputs["numbers"])
    for column in STRING_COLUMNS:
        values, counts = np.unique(inputs[column].astype(bytes), return_counts=True)
        sums[f"{column}_counts"] = {
            value.decode(): int(count) for value, count in zip(values, counts, strict=True)
        }
    return sums


def statistics_from(sums):
    """The numbers' mean and variance, and each string column's vocabulary: its
    MAX_VOCABULARY most frequent values (ties in value order), for build_model."""
    mean, variance = moments.mean_and_variance(sums)
    learned = {"mean": mean.tolist(), "variance": variance.tolist()}
    for column in STRING_COLUMNS:
        ranked = sorted(sums[f"{column}_counts"].items(), key=lambda item: (-item[1], item[0]))
        learned[f"{column}_vocabulary"] = [value for value, _ in ranked[:MAX_VOCABULARY]]
    return learned


def sample_examples(num_examples, seed):
    """Seeded customers of 3 classes a small model tells apart well above chance:
    the class follows a fixed random score of the numbers, the city and the
    device. `seed` picks the customers; the task is fixed."""
    teacher = np.random.default_rng(SAMPLE_TASK_SEED)
    number_weights = teacher.normal(size=(len(NUMERIC_COLUMNS), NUM_CLASSES))
    city_scores = teacher.normal(size=(len(CITIES), NUM_CLASSES))
    device_scores = teacher.normal(size=(len(DEVICES), NUM_CLASSES))
    rng = np.random.default_rng([SAMPLE_TASK_SEED, seed])
    standard = rng.normal(size=(num_examples, len(NUMERIC_COLUMNS)))
    cities = rng.integers(0, len(CITIES), num_examples)
    devices = rng.integers(0, len(DEVICES), num_examples)
    scores = standard @ number_weights + city_scores[cities] + device_scores[devices]
    # On the scales a table has: years, a yearly income, visits a month.
    numbers = [40, 50_000, 5] + standard * [12, 20_000, 3]
    inputs = {
        "numbers": numbers.astype("float32"),
        "city": np.array(CITIES, dtype=object)[cities],
        "device": np.array(DEVICES, dtype=object)[devices],
    }
    return inputs, np.argmax(scores, axis=1).astype("int32")


def prepare_batch(inputs, keys=None):
    """The columns are model inputs as they are (no augmentation: `keys` unused)."""
    del keys
    return inputs
