# The model's own augmentation, after prepare_batch's random crops and flips:
# Keras layers that draw from their own generators in training, and do nothing
# in evaluation and export. Translations move the image by up to this share of
# its height and width.
TRANSLATION = 0.1


def build_model(statistics):
    """The sample ResNet-style classifier with random horizontal flips and
    translations as layers, after the pixels are standardized with the training
    images' per-channel mean and variance (`statistics`, from statistics_from)."""
    inputs = keras.Input(shape=(IMAGE_SIZE, IMAGE_SIZE, 3), dtype="uint8", name="images")
    x = keras.layers.Normalization(mean=statistics["mean"], variance=statistics["variance"])(inputs)
    x = keras.layers.RandomFlip("horizontal")(x)
    x = keras.layers.RandomTranslation(TRANSLATION, TRANSLATION)(x)
    return keras.Model(inputs, resnet_logits(x), name="classifier")
