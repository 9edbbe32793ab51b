
NUM_CLASSES = 4
# The model's input: IMAGE_SIZE x IMAGE_SIZE x 3, uint8 (a quarter of float32's
# bytes through the input pipeline and onto the device; the model casts).
# For ImageNet-size training, 224 and a deeper network.
IMAGE_SIZE = 32
# The training target puts 1 - LABEL_SMOOTHING on the label's class and spreads
# LABEL_SMOOTHING over all classes: 0.1, as ImageNet recipes use (Szegedy et al. 2016).
LABEL_SMOOTHING = 0.1
# A classifier's loss, metric and exported outputs (toolkit/heads.py): softmax
# cross-entropy against the smoothed label, accuracy, logits and probabilities.
METRIC_NAME, per_example_loss, per_example_metric, serving_outputs = heads.classification(
    NUM_CLASSES, label_smoothing=LABEL_SMOOTHING
)
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
# One record: the two fields training reads of the ImageNet conversion scripts'
# layout (tensorflow/models, the TPU reference models), so existing shards train
# as they are (1-based labels: --label-offset 1): an image's JPEG bytes (the
# model's input, decoded by prepare_batch) and its class.
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


{% include model_partial | default("models/image.py") %}

def summarize_batch(images, labels):
    """Per-channel pixel sums over a batch of evaluation crops (numpy), added up
    over the training images."""
    del labels
    return moments.column_sums(images.reshape(-1, 3))


def statistics_from(sums):
    """The training images' per-channel mean and variance, for build_model."""
    mean, variance = moments.mean_and_variance(sums)
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
    (uint8 arrays) -> ImageNet's crops (toolkit/image_ops.py): random crops and flips
    drawn from `keys` in training, central crops (keys None) in evaluation and
    serving."""
    if keys is None:
        return image_ops.central_crops(images, IMAGE_SIZE, CENTRAL_FRACTION)
    return image_ops.training_crops(images, keys, IMAGE_SIZE, CROP_AREA, CROP_ASPECT_RATIO)
