# A keras.applications backbone, built here without its ImageNet weights (no
# download; pass weights="imagenet" where the machine can fetch them), and a
# dropout head. Its BatchNormalization layers are rebuilt synchronized, and
# with a momentum that suits a short run: the backbone's 0.999 leaves the
# moving averages, and so evaluation, near their initial values for thousands
# of steps.
BACKBONE_BATCH_NORM_MOMENTUM = 0.9
DROPOUT_RATE = 0.2
# The model's own augmentation, after prepare_batch's random crops and flips:
# Keras layers that draw from their own generators in training, and do nothing
# in evaluation and export. Translations move the image by up to this share of
# its height and width.
TRANSLATION = 0.1


def synchronized(layer):
    """A copy of the backbone's `layer`; a BatchNormalization one normalizes with
    the statistics of the global batch (synchronized across replicas)."""
    config = layer.get_config()
    if isinstance(layer, keras.layers.BatchNormalization):
        config.update(synchronized=True, momentum=BACKBONE_BATCH_NORM_MOMENTUM)
    return layer.__class__.from_config(config)


def build_model(statistics):
    """MobileNetV3Small on the images standardized with the training images'
    per-channel mean and variance (`statistics`, from statistics_from) and
    flipped and translated at random, then global pooling, dropout and the
    logits."""
    backbone = keras.applications.MobileNetV3Small(
        input_shape=(IMAGE_SIZE, IMAGE_SIZE, 3),
        include_top=False,
        weights=None,
        include_preprocessing=False,
    )
    synchronized_backbone = keras.models.clone_model(backbone, clone_function=synchronized)
    synchronized_backbone.set_weights(backbone.get_weights())  # pretrained ones, if asked for
    inputs = keras.Input(shape=(IMAGE_SIZE, IMAGE_SIZE, 3), dtype="uint8", name="images")
    x = keras.layers.Normalization(mean=statistics["mean"], variance=statistics["variance"])(inputs)
    x = keras.layers.RandomFlip("horizontal")(x)
    x = keras.layers.RandomTranslation(TRANSLATION, TRANSLATION)(x)
    x = keras.layers.GlobalAveragePooling2D()(synchronized_backbone(x))
    x = keras.layers.Dropout(DROPOUT_RATE)(x)
    # float32 logits keep the softmax and the loss numerically stable under mixed
    # precision (and are the default dtype without it).
    outputs = keras.layers.Dense(NUM_CLASSES, dtype="float32", name="logits")(x)
    return keras.Model(inputs, outputs, name="classifier")
