
NUM_CLASSES = 4
# One example's label: a class index.
LABEL_SHAPE = ()
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
{%- if cookiecutter.data_source == "tfrecord" %}
# What the manifest records as the format its counts and checks are about: the
# layout of the ImageNet conversion scripts of tensorflow/models and the TPU
# reference models, so existing shards train as they are (1-based labels:
# --label-offset 1).
FORMAT = "tf.train.Example: image/encoded JPEG, image/class/label int64"
{%- endif %}
# What a client sends the exported model: encoded JPEG images.
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
{%- if cookiecutter.data_source == "tfrecord" %}


def check_labels(low, high):
    """Why labels from `low` to `high` (the smallest and largest of a shard's,
    less --label-offset) cannot train, or None: each must be a class."""
    for label in (low, high):
        if not float(label).is_integer() or not 0 <= label < NUM_CLASSES:
            return (
                f"label {label:g} is not a class in 0..{NUM_CLASSES - 1} - fix the labels,"
                " or NUM_CLASSES in task.py (on a GPU, cross-entropy gives NaN or garbage"
                " for such a label, not an error)"
            )
    return None
{%- endif %}


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
    """Decoded uint8 images -> training crops and flips drawn from `keys`, or
    (keys None) central crops."""
    if keys is None:
        return each_image(evaluation_image, images)
    return each_image(training_image, images, keys)
{%- if cookiecutter.data_source == "tfrecord" %}


def encode(image, label, jpeg=None):
    """One uint8 image (height, width, 3) and its label, as the conversion scripts
    write them. `jpeg`: the image's file when it is a JPEG, stored as it is (as
    the ImageNet converters do): encoding it again would lose detail and time."""
    height, width, channels = image.shape
    if jpeg is None:
        jpeg = tf.io.encode_jpeg(image, quality=95).numpy()
    features = {
        "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[jpeg])),
        "image/format": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"JPEG"])),
        "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])),
        "image/height": tf.train.Feature(int64_list=tf.train.Int64List(value=[height])),
        "image/width": tf.train.Feature(int64_list=tf.train.Int64List(value=[width])),
        "image/channels": tf.train.Feature(int64_list=tf.train.Int64List(value=[channels])),
    }
    example = tf.train.Example(features=tf.train.Features(feature=features))
    return example.SerializeToString()


def parse_batch(records, keys=None):
    """A batch of serialized records -> (images, int32 labels as stored): training
    crops and flips drawn from `keys`, decoding only the crop, or (keys None)
    central crops."""
    examples = tf.io.parse_example(
        records,
        {
            "image/encoded": tf.io.FixedLenFeature([], tf.string),
            "image/class/label": tf.io.FixedLenFeature([], tf.int64),
        },
    )
    encoded = examples["image/encoded"]
    labels = tf.cast(examples["image/class/label"], tf.int32)
    if keys is None:
        return each_image(evaluation_image_from_jpeg, encoded), labels
    return each_image(training_image_from_jpeg, encoded, keys), labels


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


def serving_inputs(image_bytes):
    """JPEG bytes -> model inputs, preprocessed as evaluation is."""
    return each_image(evaluation_image_from_jpeg, image_bytes)


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
{%- if cookiecutter.data_source == "tfrecord" %}


def training_image_from_jpeg(encoded, key):
    """JPEG bytes -> the same as training_image, decoding only the crop."""
    window = crop_window(tf.io.extract_jpeg_shape(encoded), key)
    crop = tf.io.decode_and_crop_jpeg(encoded, window, channels=3)
    return finish_training_image(crop, key)
{%- endif %}


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
