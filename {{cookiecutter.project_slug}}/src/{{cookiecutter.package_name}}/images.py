"""Images: the preprocessing of training and evaluation images.

Images travel as uint8 until the model casts them (a quarter of float32's
bytes through the input pipeline and onto the device). Training crops a random
box and flips; evaluation takes the central crop. Every random choice is drawn
from the example's own key (stateless ops), so augmentation is a pure function
of (seed, epoch, step) and a resumed run sees the images an uninterrupted run
sees, on any number of replicas.
"""

import tensorflow as tf

# The model's input: IMAGE_SIZE x IMAGE_SIZE x 3, uint8. For ImageNet-size
# training, 224 (and a deeper network in model.py).
IMAGE_SIZE = 32
# Training crops cover this share of the image's area, at these aspect ratios
# (the Inception crop; ImageNet training uses (0.08, 1.0)).
CROP_AREA = (0.25, 1.0)
CROP_ASPECT_RATIO = (3 / 4, 4 / 3)
# Evaluation keeps the central 87.5% of each side (the standard ImageNet crop).
CENTRAL_FRACTION = 0.875


def crop_window(shape, key):
    """A random box of the image (offset_y, offset_x, height, width), from `key`."""
    begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
        shape,
        bounding_boxes=tf.constant([[[0.0, 0.0, 1.0, 1.0]]]),
        seed=key,
        min_object_covered=0.1,
        aspect_ratio_range=CROP_ASPECT_RATIO,
        area_range=CROP_AREA,
        use_image_if_no_bounding_boxes=True,
    )
    return tf.stack([begin[0], begin[1], size[0], size[1]])


def finish_training_image(crop, key):
    resized = tf.image.resize(crop, [IMAGE_SIZE, IMAGE_SIZE])
    flipped = tf.image.stateless_random_flip_left_right(resized, seed=key[::-1])
    return tf.cast(tf.clip_by_value(tf.round(flipped), 0, 255), tf.uint8)


def training_image(image, key):
    """A decoded uint8 image -> a random crop, resized and maybe flipped."""
    window = crop_window(tf.shape(image), key)
    crop = tf.slice(image, [window[0], window[1], 0], [window[2], window[3], 3])
    return finish_training_image(crop, key)


def training_image_from_jpeg(encoded, key):
    """JPEG bytes -> the same as training_image, decoding only the crop."""
    window = crop_window(tf.io.extract_jpeg_shape(encoded), key)
    crop = tf.io.decode_and_crop_jpeg(encoded, window, channels=3)
    return finish_training_image(crop, key)


def evaluation_image(image):
    """A decoded uint8 image -> its central crop, resized."""
    crop = tf.image.central_crop(image, CENTRAL_FRACTION)
    resized = tf.image.resize(crop, [IMAGE_SIZE, IMAGE_SIZE])
    return tf.cast(tf.clip_by_value(tf.round(resized), 0, 255), tf.uint8)


def evaluation_image_from_jpeg(encoded):
    return evaluation_image(tf.io.decode_jpeg(encoded, channels=3))


def each_image(function, *batches):
    """`function` applied to each example of the batches (decode and crop are per image)."""
    return tf.map_fn(
        lambda example: function(*example),
        batches,
        fn_output_signature=tf.TensorSpec([IMAGE_SIZE, IMAGE_SIZE, 3], tf.uint8),
    )
