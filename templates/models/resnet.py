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


def resnet_logits(x):
    """The small ResNet's logits of standardized images `x`."""
    x = keras.layers.ReLU()(batch_norm()(conv(STAGE_WIDTHS[0], strides=2)(x)))
    for stage, width in enumerate(STAGE_WIDTHS):
        for block in range(BLOCKS_PER_STAGE):
            x = residual_block(x, width, strides=2 if stage > 0 and block == 0 else 1)
    x = keras.layers.GlobalAveragePooling2D()(x)
    # float32 logits keep the softmax and the loss numerically stable under mixed
    # precision (and are the default dtype without it).
    return keras.layers.Dense(NUM_CLASSES, dtype="float32", name="logits")(x)
