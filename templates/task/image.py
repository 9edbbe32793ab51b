
NUM_CLASSES = 4
# The model's input: IMAGE_SIZE x IMAGE_SIZE x 3, uint8 (a quarter of float32's
# bytes through the input pipeline and onto the device; the model casts).
# For ImageNet-size training, 224 and a deeper network.
IMAGE_SIZE = 32
METRIC_NAME = "accuracy"
# The training target puts 1 - LABEL_SMOOTHING on the label's class and spreads
# LABEL_SMOOTHING over all classes: 0.1, as ImageNet recipes use (Szegedy et al. 2016).
LABEL_SMOOTHING = 0.1
# Channels per stage (the stem and each stage after the first halve the
# resolution) and residual blocks per stage: small, for 32x32 images on CPUs.
STAGE_WIDTHS = (16, 32)
BLOCKS_PER_STAGE = 1
WEIGHT_DECAY = 1e-4
# Training crops cover this share of the image's area, at these aspect ratios
# (the Inception crop; ImageNet training uses (0.08, 1.0)).
CROP_AREA = (0.25, 1.0)
CROP_ASPECT_RATIO = (3 / 4, 4 / 3)
# Evaluation keeps the central 87.5% of each side (the standard ImageNet crop).
CENTRAL_FRACTION = 0.875
# The sample task is fixed (its own seed); --seed changes shuffling and init.
SAMPLE_TASK_SEED = 1234
# One record, in the layout of the ImageNet conversion scripts of
# tensorflow/models and the TPU reference models, so existing shards train as
# they are (1-based labels: --label-offset 1): an image's JPEG bytes (the model's
# input, decoded by prepare_batch) and its class.
FEATURES = features.Record(
    {
        "image/encoded": features.Image(),
        "image/class/label": features.ClassLabel(NUM_CLASSES),
    },
    label="image/class/label",
)
# What a client sends the exported model: JPEG images (a name without the
# record's "/", which a signature's input cannot have).
SERVING_INPUT = tf.TensorSpec([None], tf.string, name="image_bytes")


{% include "models/resnet.py" %}

{% include model_partial | default("models/image.py") %}

{% include "partials/classification.py" %}

def summarize_batch(images, labels):
    """Per-channel pixel sums over a batch of evaluation crops (numpy), added up
    over the training images."""
    del labels
    pixels = images.reshape(-1, 3).astype("float64")
    return {
        "count": len(pixels),
        "sum": pixels.sum(axis=0),
        "sum_of_squares": np.square(pixels).sum(axis=0),
    }


def statistics_from(sums):
    """The training images' per-channel mean and variance, for build_model."""
    mean = sums["sum"] / sums["count"]
    variance = np.maximum(sums["sum_of_squares"] / sums["count"] - np.square(mean), 0.0)
    return {"mean": mean.tolist(), "variance": variance.tolist()}


def sample_examples(num_examples, seed):
    """Seeded IMAGE_SIZE x IMAGE_SIZE uint8 images of 4 classes a small CNN tells
    apart well above chance (25%): horizontal stripes, vertical stripes, a
    checkerboard, and noise alone, each with a random colour, period and phase
    (crops and flips keep the class). `seed` picks the images; the task is fixed."""
    rng = np.random.default_rng([SAMPLE_TASK_SEED, seed])
    labels = rng.integers(0, NUM_CLASSES, num_examples)
    rows, columns = np.mgrid[0:IMAGE_SIZE, 0:IMAGE_SIZE]
    periods = rng.uniform(4, 10, num_examples)[:, None, None]
    phases = rng.uniform(0, 2 * np.pi, num_examples)[:, None, None]
    horizontal = np.sin(2 * np.pi * rows / periods + phases)
    vertical = np.sin(2 * np.pi * columns / periods + phases)
    classes = labels[:, None, None]
    patterns = np.select(
        [classes == 0, classes == 1, classes == 2],
        [horizontal, vertical, np.sign(horizontal * vertical)],
        0.0,
    )
    colours = rng.uniform(0.3, 1.0, (num_examples, 1, 1, 3))
    noise = rng.normal(0, 0.35, (num_examples, IMAGE_SIZE, IMAGE_SIZE, 3))
    images = 127.5 + 100 * (patterns[..., None] * colours + noise)
    return np.clip(images, 0, 255).astype("uint8"), labels.astype("int32")


def prepare_batch(images, keys=None):
    """Images as records hold them (JPEG bytes) or as sample_examples makes them
    (uint8 arrays) -> training crops and flips drawn from `keys` (decoding only
    the crop of a JPEG), or (keys None) central crops."""
    encoded = tf.as_dtype(images.dtype) == tf.string
    if keys is None:
        return each_image(evaluation_image_from_jpeg if encoded else evaluation_image, images)
    return each_image(training_image_from_jpeg if encoded else training_image, images, keys)
{%- if cookiecutter.data_source == "tfrecord" %}


def describe_batch(records, decode=True):
    """What `index` learns from a batch of records, whatever they hold: each
    record's image shape (decoding the whole image; with decode=False, from the
    JPEG header alone), label count, and the labels."""
    examples = tf.io.parse_example(
        records,
        {
            "image/encoded": tf.io.FixedLenFeature([], tf.string, default_value=""),
            "image/class/label": tf.io.RaggedFeature(tf.int64),
        },
    )
    shapes = tf.map_fn(
        decoded_shape if decode else tf.io.extract_jpeg_shape,
        examples["image/encoded"],
        fn_output_signature=tf.TensorSpec([3], tf.int32),
    )
    labels = examples["image/class/label"]
    return shapes, labels.row_lengths(), labels.flat_values


def decoded_shape(encoded):
    """A JPEG's shape as training decodes it (3 channels), decoding all of it with
    training's decoder (the whole image as the crop window): a truncated or corrupt
    image fails here, in `index`, not at the step that first crops it."""
    height, width = tf.unstack(tf.io.extract_jpeg_shape(encoded)[:2])
    window = tf.stack([0, 0, height, width])
    return tf.shape(tf.io.decode_and_crop_jpeg(encoded, window, channels=3))
{%- endif %}


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
