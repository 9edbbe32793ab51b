
NUM_FEATURES = 20
INPUT_SHAPE = (NUM_FEATURES,)
NUM_CLASSES = 4
# One example's label: a class index.
LABEL_SHAPE = ()
METRIC_NAME = "accuracy"
# The training target puts 1 - LABEL_SMOOTHING on the label's class and spreads
# LABEL_SMOOTHING over all classes (0: plain cross-entropy; 0.1 suits large classifiers).
LABEL_SMOOTHING = 0.0
# The sample task is fixed (its own seed); --seed changes shuffling and init.
SAMPLE_TASK_SEED = 1234
{%- if cookiecutter.data_source == "tfrecord" %}
# What the manifest records as the format its counts and checks are about.
FORMAT = "tf.train.Example: features float32[N], label int64"
{%- endif %}
# What a client sends the exported model: raw feature vectors.
SERVING_INPUT = tf.TensorSpec([None, NUM_FEATURES], tf.float32, name="features")


{% include model_partial | default("models/tabular.py") %}

{% include "partials/classification.py" %}

def summarize_batch(features, labels):
    """Per-feature sums over a batch (numpy), added up over the training data."""
    del labels
    features = features.astype("float64")
    return {
        "count": len(features),
        "sum": features.sum(axis=0),
        "sum_of_squares": np.square(features).sum(axis=0),
    }


def statistics_from(sums):
    """The training data's per-feature mean and variance, for build_model."""
    mean = sums["sum"] / sums["count"]
    variance = np.maximum(sums["sum_of_squares"] / sums["count"] - np.square(mean), 0.0)
    return {"mean": mean.tolist(), "variance": variance.tolist()}


def sample_examples(num_examples, seed):
    """A seeded classification task a small MLP learns well above chance (25%).

    Labels come from a fixed random two-layer teacher network, so the task is
    the same for every `seed`; `seed` only picks which examples are drawn.
    """
    teacher = np.random.default_rng(SAMPLE_TASK_SEED)
    hidden_weights = teacher.normal(size=(NUM_FEATURES, 32))
    output_weights = teacher.normal(size=(32, NUM_CLASSES))
    features = np.random.default_rng(seed).normal(size=(num_examples, NUM_FEATURES))
    labels = np.argmax(np.tanh(features @ hidden_weights) @ output_weights, axis=1)
    return features.astype("float32"), labels.astype("int32")


def prepare_batch(features, keys=None):
    """Feature vectors are model inputs as they are (no augmentation: `keys` unused)."""
    del keys
    return features
{%- if cookiecutter.data_source == "tfrecord" %}


def example_from_csv(columns, label):
    """One CSV row -> (features, label) for encode: `columns` holds every column
    but the label's, {name: text} in the file's order, each a feature here."""
    if len(columns) != NUM_FEATURES:
        raise ValueError(
            f"{len(columns)} feature columns, the task takes {NUM_FEATURES} - change"
            " NUM_FEATURES in task.py, or drop columns"
        )
    features = [number(text, f"column {column!r}") for column, text in columns.items()]
    return np.array(features, np.float32), number(label, "the label")


{% include "partials/csv_number.py" %}

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


def parse_batch(records, keys=None):
    """A batch of serialized records -> (features [batch, NUM_FEATURES], int32
    labels), one parse_example call per batch (no augmentation: `keys` unused)."""
    del keys
    examples = tf.io.parse_example(
        records,
        {
            "features": tf.io.FixedLenFeature([NUM_FEATURES], tf.float32),
            "label": tf.io.FixedLenFeature([], tf.int64),
        },
    )
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


def serving_inputs(features):
    """Feature vectors are model inputs as they are."""
    return features
