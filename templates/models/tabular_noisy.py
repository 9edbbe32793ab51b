# The standard deviation of the noise added to each standardized feature, and
# the dropout rate after each hidden layer: regularization that draws random
# numbers at every training step (none in evaluation and export).
NOISE_STDDEV = 0.1
DROPOUT_RATE = 0.2


def build_model(statistics):
    """The sample MLP with random layers, returning logits: Gaussian noise on the
    features standardized with the training data's mean and variance
    (`statistics`, from statistics_from), and dropout after each hidden layer."""
    inputs = keras.Input(shape=(NUM_FEATURES,), name="features")
    # Standardized in float32: a raw value over 256 (a variance over 65,504)
    # overflows float16 under mixed precision.
    x = keras.layers.Normalization(
        mean=statistics["mean"], variance=statistics["variance"], dtype="float32"
    )(inputs)
    x = keras.layers.GaussianNoise(NOISE_STDDEV)(x)
    for width in (64, 64):
        x = keras.layers.Dense(
            width, activation="relu", kernel_regularizer=keras.regularizers.L2(1e-4)
        )(x)
        x = keras.layers.Dropout(DROPOUT_RATE)(x)
    # float32 logits keep the softmax and the loss numerically stable under mixed
    # precision (and are the default dtype without it).
    outputs = keras.layers.Dense(NUM_CLASSES, dtype="float32", name="logits")(x)
    return keras.Model(inputs, outputs, name="classifier")
