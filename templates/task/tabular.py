
NUM_FEATURES = 20
NUM_CLASSES = 4
# The training target puts 1 - LABEL_SMOOTHING on the label's class and spreads
# LABEL_SMOOTHING over all classes (0: plain cross-entropy; 0.1 suits large classifiers).
LABEL_SMOOTHING = 0.0
# A classifier's loss, metric and exported outputs (toolkit/heads.py): softmax
# cross-entropy against the smoothed label, accuracy, logits and probabilities.
METRIC_NAME, per_example_loss, per_example_metric, serving_outputs = heads.classification(
    NUM_CLASSES, label_smoothing=LABEL_SMOOTHING
)
# The sample task is fixed (its own seed); --seed changes shuffling and init.
SAMPLE_TASK_SEED = 1234
# One record: a vector of features, the model's input (and what a client sends
# the exported model), and a class index.
FEATURES = features.Record(
    {
        "features": features.Tensor(shape=(NUM_FEATURES,), dtype="float32"),
        "label": features.ClassLabel(NUM_CLASSES),
    },
    label="label",
)


{% include "models/tabular.py" %}

def summarize_batch(features, labels):
    """Per-feature sums over a batch (numpy), added up over the training data."""
    del labels
    return moments.column_sums(features)


def statistics_from(sums):
    """The training data's per-feature mean and variance, for build_model."""
    mean, variance = moments.mean_and_variance(sums)
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
