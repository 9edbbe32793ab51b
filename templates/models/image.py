{% include "models/resnet.py" %}

def build_model(statistics):
    """A small ResNet-style classifier of uint8 images, returning logits. Pixels are
    standardized with the training images' per-channel mean and variance
    (`statistics`, from statistics_from).

    For ImageNet-size images, return keras.applications.ResNet50(weights=None,
    input_shape=(IMAGE_SIZE, IMAGE_SIZE, 3), classes=NUM_CLASSES) after the
    Normalization layer instead; its BatchNormalization layers are not synchronized,
    which the doctor's sync check reports on several replicas (docs/your-model.md,
    "Batch normalization", shows how to synchronize them).
    """
    inputs = keras.Input(shape=(IMAGE_SIZE, IMAGE_SIZE, 3), dtype="uint8", name="images")
    x = keras.layers.Normalization(mean=statistics["mean"], variance=statistics["variance"])(inputs)
    return keras.Model(inputs, resnet_logits(x), name="classifier")
