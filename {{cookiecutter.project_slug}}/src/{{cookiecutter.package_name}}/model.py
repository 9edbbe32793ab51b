"""The model and its optimizer: change the network here.

Both are built by the training code under `strategy.scope()`, so their variables
are mirrored on every replica.
"""
{% if cookiecutter.keras_package == "keras3" %}
import keras
{%- else %}
import tf_keras as keras
{%- endif %}

from {{ cookiecutter.package_name }}.data import NUM_CLASSES, NUM_FEATURES
{%- if cookiecutter.mixed_precision == "yes" %}


def set_precision_policy():
    """mixed_float16 compute with float32 weights; must run before the model is built."""
    keras.mixed_precision.set_global_policy("mixed_float16")
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


def make_optimizer(name, learning_rate):
    """Adam for real runs; plain SGD is what equivalence checks use (Adam hides
    loss-scaling errors)."""
    if name == "sgd":
        return keras.optimizers.SGD(learning_rate=learning_rate)
    return keras.optimizers.Adam(learning_rate=learning_rate)
