"""The model, its loss and its optimizer: change the network here.

The model and the optimizer are built by the engines under `strategy.scope()`,
so their variables are mirrored on every replica.
"""

import tensorflow as tf
{% if cookiecutter.mixed_precision == "bfloat16" %}
from {{ cookiecutter.package_name }} import TrainerError
{%- endif %}
from {{ cookiecutter.package_name }}.compat import keras
{%- if cookiecutter.task == "image" %}
from {{ cookiecutter.package_name }}.data import NUM_CLASSES
from {{ cookiecutter.package_name }}.images import IMAGE_SIZE
{%- else %}
from {{ cookiecutter.package_name }}.data import NUM_CLASSES, NUM_FEATURES
{%- endif %}

# The training metric, reported per epoch next to the loss.
METRIC_NAME = "accuracy"
{%- if cookiecutter.task == "image" %}
# Channels per stage (the stem and each stage after the first halve the
# resolution) and residual blocks per stage: small, for 32x32 images on CPUs.
STAGE_WIDTHS = (16, 32)
BLOCKS_PER_STAGE = 1
WEIGHT_DECAY = 1e-4
{%- endif %}
{%- if cookiecutter.mixed_precision != "no" %}
# The policy of --mixed-precision: {{ cookiecutter.mixed_precision }} compute, float32 weights.
MIXED_POLICY = "mixed_{{ cookiecutter.mixed_precision }}"
{%- endif %}
{%- if cookiecutter.mixed_precision == "bfloat16" %}
# GPUs with bfloat16 math: Ampere (A100, A10, L4, RTX 30xx) and newer.
BFLOAT16_COMPUTE_CAPABILITY = (8, 0)
{%- endif %}
{%- if cookiecutter.mixed_precision != "no" %}


def set_precision_policy(mixed_precision):
    """MIXED_POLICY compute with float32 weights, or float32 (what equivalence
    checks use); must run before the model is built."""
{%- if cookiecutter.mixed_precision == "bfloat16" %}
    if mixed_precision:
        check_bfloat16_gpus(gpu_compute_capabilities())
{%- endif %}
    keras.mixed_precision.set_global_policy(MIXED_POLICY if mixed_precision else "float32")
{%- endif %}
{%- if cookiecutter.mixed_precision == "bfloat16" %}


def gpu_compute_capabilities():
    """(major, minor) of each visible GPU that reports one (CUDA GPUs do)."""
    details = [
        tf.config.experimental.get_device_details(gpu)
        for gpu in tf.config.list_physical_devices("GPU")
    ]
    return [found["compute_capability"] for found in details if "compute_capability" in found]


def check_bfloat16_gpus(capabilities):
    """Refuse mixed_bfloat16 on GPUs without bfloat16 math (CPUs are fine)."""
    old = [
        f"GPU {index} is {major}.{minor}"
        for index, (major, minor) in enumerate(capabilities)
        if (major, minor) < BFLOAT16_COMPUTE_CAPABILITY
    ]
    if old:
        raise TrainerError(
            "mixed_bfloat16 needs GPUs of compute capability 8.0 or newer, but "
            + ", ".join(old)
            + " - pass --no-mixed-precision, or bake the project with mixed_precision=float16"
        )
{%- endif %}
{%- if cookiecutter.task == "image" %}


def batch_norm():
    # Statistics over the global batch, not over each replica's share: only then
    # do N replicas compute what one device computes (the doctor's sync check).
    return keras.layers.BatchNormalization(synchronized=True)


def conv(width, kernel_size=3, strides=1):
    return keras.layers.Conv2D(
        width,
        kernel_size,
        strides=strides,
        padding="same",
        use_bias=False,
        kernel_regularizer=keras.regularizers.L2(WEIGHT_DECAY),
    )


def residual_block(x, width, strides):
    y = keras.layers.ReLU()(batch_norm()(conv(width, strides=strides)(x)))
    y = batch_norm()(conv(width)(y))
    shortcut = x
    if strides != 1 or x.shape[-1] != width:
        shortcut = batch_norm()(conv(width, kernel_size=1, strides=strides)(x))
    return keras.layers.ReLU()(keras.layers.Add()([y, shortcut]))


def build_model(num_classes=NUM_CLASSES):
    """A small ResNet-style classifier of uint8 images, returning logits.

    For ImageNet-size images, return keras.applications.ResNet50(weights=None,
    input_shape=(IMAGE_SIZE, IMAGE_SIZE, 3), classes=num_classes) after a
    Rescaling layer instead; its BatchNormalization layers are not synchronized,
    which the doctor's sync check reports on several replicas.
    """
    inputs = keras.Input(shape=(IMAGE_SIZE, IMAGE_SIZE, 3), dtype="uint8", name="images")
    x = keras.layers.Rescaling(1 / 127.5, offset=-1.0)(inputs)  # uint8 -> [-1, 1]
    x = keras.layers.ReLU()(batch_norm()(conv(STAGE_WIDTHS[0], strides=2)(x)))
    for stage, width in enumerate(STAGE_WIDTHS):
        for block in range(BLOCKS_PER_STAGE):
            x = residual_block(x, width, strides=2 if stage > 0 and block == 0 else 1)
    x = keras.layers.GlobalAveragePooling2D()(x)
{%- else %}


def build_model(num_features=NUM_FEATURES, num_classes=NUM_CLASSES):
    """A small MLP classifier returning logits."""
    inputs = keras.Input(shape=(num_features,), name="features")
    x = inputs
    for width in (64, 64):
        x = keras.layers.Dense(
            width, activation="relu", kernel_regularizer=keras.regularizers.L2(1e-4)
        )(x)
{%- endif %}
{%- if cookiecutter.mixed_precision != "no" %}
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
