"""A second task, as a worked example of `task.py`: topics of token sequences.

Copy it over `src/{{ cookiecutter.package_name }}/task.py` and the project trains it: the
framework and the project's equivalence, resume, evaluation and export tests
run unchanged (the template's own tests do exactly that). It differs from the
sample task in each thing `task.py` holds: int32 token ids of shape
[SEQUENCE_LENGTH] instead of float features (a record of its own, declared in
FEATURES), an Embedding model, 5 classes, random token masking as
augmentation, top-2 accuracy as the metric, and statistics of the labels
instead of the inputs (the class frequencies, which start the logits' biases at
the log prior).
"""

import numpy as np
import tensorflow as tf

from {{ cookiecutter.package_name }}.distribute.compat import keras
from {{ cookiecutter.package_name }}.toolkit import features

SEQUENCE_LENGTH = 12
# Token 0 is the mask; topic t favours tokens 1 + 12t .. 12 + 12t.
VOCABULARY_SIZE = 64
TOKENS_PER_TOPIC = 12
NUM_CLASSES = 5
METRIC_NAME = "top_2_accuracy"
# Training replaces this share of the tokens with the mask (augmentation).
MASK_RATE = 0.1
# The sample task is fixed (its own seed); --seed changes shuffling and init.
SAMPLE_TASK_SEED = 99
# One record: the token ids (in a CSV, one column of ids separated by spaces)
# and the topic. A client sends the exported model the token ids.
FEATURES = features.Record(
    {
        "tokens": features.Tensor(shape=(SEQUENCE_LENGTH,), dtype="int32"),
        "topic": features.ClassLabel(NUM_CLASSES),
    },
    label="topic",
)


def build_model(statistics):
    """Token embeddings, averaged, then a small MLP returning logits, whose biases
    start at the training data's log class frequencies (`statistics`)."""
    inputs = keras.Input(shape=(SEQUENCE_LENGTH,), dtype="int32", name="tokens")
    x = keras.layers.Embedding(VOCABULARY_SIZE, 16)(inputs)
    x = keras.layers.GlobalAveragePooling1D()(x)
    x = keras.layers.Dense(32, activation="relu")(x)
    prior = keras.initializers.Constant(statistics["log_prior"])
    # float32 logits keep the softmax and the loss stable under mixed precision.
    logits = keras.layers.Dense(NUM_CLASSES, bias_initializer=prior, dtype="float32")(x)
    return keras.Model(inputs, logits, name="topics")


def per_example_loss(labels, logits):
    """Cross-entropy per example, in float32 whatever the compute dtype."""
    logits = tf.cast(logits, tf.float32)
    return keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)


def per_example_metric(labels, logits):
    """1.0 where the label's class is among the two highest logits, else 0.0."""
    labels = tf.cast(labels, tf.int32)
    return tf.cast(tf.math.in_top_k(labels, tf.cast(logits, tf.float32), k=2), tf.float32)


def summarize_batch(tokens, labels):
    """Examples per class in a batch (numpy), added up over the training data."""
    del tokens
    return {"class_counts": np.bincount(labels, minlength=NUM_CLASSES)}


def statistics_from(sums):
    """The log of each class's share of the training examples (a class never seen
    gets the log of half an example's share)."""
    counts = np.maximum(sums["class_counts"], 0.5)
    return {"log_prior": np.log(counts / counts.sum()).tolist()}


def sample_examples(num_examples, seed):
    """Seeded token sequences of 5 topics: half of each sequence's tokens come
    from its topic's own 12, the rest from the whole vocabulary."""
    rng = np.random.default_rng([SAMPLE_TASK_SEED, seed])
    labels = rng.integers(0, NUM_CLASSES, num_examples)
    shape = (num_examples, SEQUENCE_LENGTH)
    topical = 1 + labels[:, None] * TOKENS_PER_TOPIC + rng.integers(0, TOKENS_PER_TOPIC, shape)
    anything = rng.integers(1, VOCABULARY_SIZE, shape)
    tokens = np.where(rng.random(shape) < 0.5, topical, anything)
    return tokens.astype("int32"), labels.astype("int32")


def prepare_batch(tokens, keys=None):
    """Training (with keys): each token masked with probability MASK_RATE, drawn
    from its example's key; evaluation: the tokens as they are."""
    if keys is None:
        return tokens

    def mask(example):
        sequence, key = example
        kept = tf.random.stateless_uniform([SEQUENCE_LENGTH], seed=key) >= MASK_RATE
        return tf.where(kept, sequence, tf.zeros_like(sequence))

    return tf.map_fn(mask, (tokens, keys), fn_output_signature=tokens.dtype)


def serving_outputs(logits):
    """What the exported model returns: the topics' logits and probabilities."""
    return {"logits": logits, "probabilities": tf.nn.softmax(logits)}
