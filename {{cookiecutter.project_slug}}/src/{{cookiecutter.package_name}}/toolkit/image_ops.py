"""ImageNet training's standard crops, for an image task's prepare_batch (after
tensorflow/models' vision preprocess_ops): in training, a random box of a
random share of the image and aspect ratio (the Inception crop), resized and
flipped at random; in evaluation and serving, the central crop, resized.

Images come decoded (uint8, 3 channels) or as JPEG bytes, of which training
decodes only the crop's part (tf.io.decode_and_crop_jpeg). Every random choice
comes from the example's stateless key, so a resumed run crops as an
uninterrupted one would.
"""

import tensorflow as tf


def training_crops(images, keys, size, area=(0.08, 1.0), aspect_ratio=(3 / 4, 4 / 3)):
    """A batch of images -> `size` x `size` uint8 crops covering `area` of each
    image at `aspect_ratio`, resized and flipped, all drawn from `keys`."""

    def crop(image, key):
        shape = tf.io.extract_jpeg_shape(image) if image.dtype == tf.string else tf.shape(image)
        begin, box, _ = tf.image.stateless_sample_distorted_bounding_box(
            shape,
            bounding_boxes=tf.constant([[[0.0, 0.0, 1.0, 1.0]]]),
            seed=key,
            min_object_covered=0.1,
            aspect_ratio_range=aspect_ratio,
            area_range=area,
            use_image_if_no_bounding_boxes=True,
        )
        if image.dtype == tf.string:
            window = tf.stack([begin[0], begin[1], box[0], box[1]])
            part = tf.io.decode_and_crop_jpeg(image, window, channels=3)
        else:
            part = tf.slice(image, begin, [box[0], box[1], 3])
        resized = tf.image.resize(part, [size, size])
        return as_pixels(tf.image.stateless_random_flip_left_right(resized, seed=key[::-1]))

    return each_image(crop, size, images, keys)


def central_crops(images, size, central_fraction=0.875):
    """A batch of images -> the central `central_fraction` of each side, resized
    to `size` x `size` uint8 (0.875: the standard ImageNet evaluation crop)."""

    def crop(image):
        if image.dtype == tf.string:
            image = tf.io.decode_jpeg(image, channels=3)
        part = tf.image.central_crop(image, central_fraction)
        return as_pixels(tf.image.resize(part, [size, size]))

    return each_image(crop, size, images)


def as_pixels(image):
    return tf.cast(tf.clip_by_value(tf.round(image), 0, 255), tf.uint8)


def each_image(function, size, *batches):
    """`function` applied to each example of the batches (images differ in size:
    decoding and cropping are per image)."""
    return tf.map_fn(
        lambda example: function(*example),
        tuple(tf.convert_to_tensor(batch) for batch in batches),
        fn_output_signature=tf.TensorSpec([size, size, 3], tf.uint8),
    )
