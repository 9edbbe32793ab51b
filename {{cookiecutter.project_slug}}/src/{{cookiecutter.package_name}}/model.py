"""The model, its loss and its optimizer: change the network here.

The model and the optimizer are built by the engines under `strategy.scope()`,
so their variables are mirrored on every replica.
"""

import tensorflow as tf

from {{ cookiecutter.package_name }}.compat import keras
from {{ cookiecutter.package_name }}.data import NUM_CLASSES, NUM_FEATURES

# The training metric, reported per epoch next to the loss.
METRIC_NAME = "accuracy"
{%- if cookiecutter.mixed_precision == "yes" %}


def set_precision_policy(mixed_precision):
    """mixed_float16 compute with float32 weights, or float32 (what equivalence
    checks use); must run before the model is built."""
    keras.mixed_precision.set_global_policy("mixed_float16" if mixed_precision else "float32")
{%- endif %}


def build_model(num_features=NUM_FEATURES, num_classes=NUM_CLASSES):
    """A small MLP classifier returning logits."""
    inputs = keras.Input(shape=(num_features,), name="features")
    x = inputs
    for width in (64, 64):
        x = keras.layers.Dense(
            width, activation="relu", kernel_regularizer=keras.regularizers.L2(1e-4)
        )(x)
{%- if cookiecutter.mixed_precision == "yes" %}
    # float32 logits keep the softmax and the loss numerically stable.
    outputs = keras.layers.Dense(num_classes, dtype="float32", name="logits")(x)
{%- else %}
    outputs = keras.layers.Dense(num_classes, name="logits")(x)
{%- endif %}
    return keras.Model(inputs, outputs, name="classifier")


def per_example_loss(labels, logits):
    """Cross-entropy per example, in float32 whatever the compute dtype (float16
    loses the softmax's precision). Training adds the regularization once per
    step; evaluation reports this loss alone."""
    logits = tf.cast(logits, tf.float32)
    return keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)


def make_loss():
    """The same loss as a Keras loss object, for `compile` (the fit engine)."""
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def make_metric():
    return keras.metrics.SparseCategoricalAccuracy(name=METRIC_NAME)


def make_optimizer(name, learning_rate):
    """Adam for real runs; plain SGD is what equivalence checks use (Adam hides
    loss-scaling errors)."""
    if name == "sgd":
        return keras.optimizers.SGD(learning_rate=learning_rate)
    return keras.optimizers.Adam(learning_rate=learning_rate)
