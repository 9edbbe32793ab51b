def build_model(statistics):
    """A small MLP classifier returning logits, of features standardized with the
    training data's mean and variance (`statistics`, from statistics_from)."""
    inputs = keras.Input(shape=(NUM_FEATURES,), name="features")
    x = moments.normalization(statistics)(inputs)
    for width in (64, 64):
        x = keras.layers.Dense(
            width, activation="relu", kernel_regularizer=keras.regularizers.L2(1e-4)
        )(x)
    # float32 logits keep the softmax and the loss numerically stable under mixed
    # precision (and are the default dtype without it).
    outputs = keras.layers.Dense(NUM_CLASSES, dtype="float32", name="logits")(x)
    return keras.Model(inputs, outputs, name="classifier")
