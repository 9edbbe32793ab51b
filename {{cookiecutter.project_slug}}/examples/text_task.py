"""A worked example of `task.py` for text: the sentiment of short reviews, raw
strings in, as most users' first model of their own is.

Copy it over `src/{{ cookiecutter.package_name }}/task.py` and the project trains it: the
framework and the project's equivalence, resume, evaluation, export, doctor,
data and record-format tests run unchanged (the template's own tests do exactly
that), and `import-csv` takes a CSV of a `text` column and a label.
What differs from the sample classifier: one `Text` input (a string per
example, in a record and from a client alike); a vocabulary of the training
split's words alone (its statistics: `summarize_batch` counts words, and a word
never seen in training maps to one index of its own); a `TextVectorization`
layer in the model (lowercased, punctuation stripped, split on spaces, cut or
padded to SEQUENCE_LENGTH tokens); an `Embedding` whose padding is masked and
a recurrent layer (`GRU`) over the words; 2 classes.
"""

import re

import numpy as np

from {{ cookiecutter.package_name }}.distribute.compat import keras
from {{ cookiecutter.package_name }}.toolkit import features, heads

NUM_CLASSES = 2
# Tokens a review is cut or padded to, the most frequent training words kept,
# and the width of a word's embedding and of the recurrent layer.
SEQUENCE_LENGTH = 16
MAX_VOCABULARY = 20_000
EMBEDDING_WIDTH = 16
RECURRENT_UNITS = 16
# Cross-entropy, accuracy, logits and probabilities (toolkit/heads.py).
METRIC_NAME, per_example_loss, per_example_metric, serving_outputs = heads.classification(
    NUM_CLASSES
)
# What TextVectorization's "lower_and_strip_punctuation" strips.
PUNCTUATION = re.compile(r"[!\"#$%&()\*\+,\-\./:;<=>?@\[\\\]^_`{|}~']")
# The sample task is fixed (its own seed); --seed changes shuffling and init.
SAMPLE_TASK_SEED = 7
POSITIVE = ("great", "loved", "excellent", "superb", "wonderful", "moving")
NEGATIVE = ("awful", "boring", "hated", "terrible", "dull", "clumsy")
FILLER = ("the", "film", "was", "a", "plot", "acting", "and", "really", "quite", "story", "its")
# One record: the review's text, the model's input (and what a client sends the
# exported model), and its sentiment, 0 (negative) or 1 (positive).
FEATURES = features.Record(
    {"text": features.Text(), "label": features.ClassLabel(NUM_CLASSES)},
    label="label",
)


def build_model(statistics):
    """Raw strings -> token ids of the training vocabulary -> embeddings -> a GRU
    over the words present (the padding masked) -> logits."""
    inputs = keras.Input(shape=(), dtype="string", name="text")
    tokens = keras.layers.TextVectorization(
        vocabulary=statistics["vocabulary"],
        standardize="lower_and_strip_punctuation",
        output_sequence_length=SEQUENCE_LENGTH,
    )(inputs)
    # Token 0 is the padding, 1 a word never seen in training, then the vocabulary.
    tokens_in_all = len(statistics["vocabulary"]) + 2
    x = keras.layers.Embedding(tokens_in_all, EMBEDDING_WIDTH, mask_zero=True)(tokens)
    x = keras.layers.GRU(RECURRENT_UNITS)(x)
    # float32 logits keep the softmax and the loss stable under mixed precision.
    outputs = keras.layers.Dense(NUM_CLASSES, dtype="float32", name="logits")(x)
    return keras.Model(inputs, outputs, name="sentiment")


def words_of(text):
    """A review's words as the model's TextVectorization splits them."""
    text = text.decode() if isinstance(text, bytes) else str(text)
    return PUNCTUATION.sub("", text.lower()).split()


def summarize_batch(texts, labels):
    """Counts of each word in a batch of reviews (numpy), added up over the
    training split: the vocabulary is the training data's alone."""
    del labels
    words = [word for text in texts for word in words_of(text)]
    values, counts = np.unique(np.array(words, dtype=str), return_counts=True)
    return {"word_counts": {str(w): int(c) for w, c in zip(values, counts, strict=True)}}


def statistics_from(sums):
    """The vocabulary: the MAX_VOCABULARY most frequent training words (ties in
    word order), for build_model."""
    ranked = sorted(sums["word_counts"].items(), key=lambda item: (-item[1], item[0]))
    return {"vocabulary": [word for word, _ in ranked[:MAX_VOCABULARY]]}


def sample_examples(num_examples, seed):
    """Seeded reviews a small recurrent model tells apart well above chance (50%):
    4 to 8 neutral words with one or two words of the review's sentiment put in
    among them, and in one review of five a word of the other sentiment too.
    `seed` picks the reviews; the task is fixed."""
    rng = np.random.default_rng([SAMPLE_TASK_SEED, seed])
    labels = rng.integers(0, NUM_CLASSES, num_examples)
    texts = []
    for label in labels:
        words = list(rng.choice(FILLER, size=rng.integers(4, 9)))
        cues = [rng.choice(POSITIVE if label else NEGATIVE) for _ in range(rng.integers(1, 3))]
        if rng.random() < 0.2:
            cues.append(rng.choice(NEGATIVE if label else POSITIVE))
        for cue in cues:
            words.insert(rng.integers(0, len(words) + 1), cue)
        texts.append(" ".join(words).capitalize() + ".")
    return np.array(texts, dtype=object), labels.astype("int32")


def prepare_batch(texts, keys=None):
    """Raw strings are model inputs as they are (no augmentation: `keys` unused)."""
    del keys
    return texts
