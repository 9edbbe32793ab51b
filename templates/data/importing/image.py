

def import_images(
    output_dir, source, eval_source=None, eval_fraction=0.1, num_files=None, workers=None, seed=0
):
    """Shards of `source`'s images (and `eval_source`'s, or a seeded `eval_fraction`
    of `source`'s for evaluation) in `output_dir`, indexed; returns the class
    names (label i is classes[i]) and the manifest's splits."""
    classes, train = labelled_images(source)
    if eval_source:
        eval_classes, evaluation = labelled_images(eval_source)
        if eval_classes != classes:
            raise ConversionError(
                f"{eval_source} has classes {eval_classes}, {source} has {classes} - give"
                " both the same class folders"
            )
    else:
        if not 0 < eval_fraction < 1:
            raise ConversionError(
                f"--eval-fraction {eval_fraction} is not between 0 and 1 - pass e.g. 0.1,"
                " or --eval-source"
            )
        count = max(1, round(len(train) * eval_fraction))
        if count >= len(train):
            raise ConversionError(
                f"{source} has {len(train)} images: too few to hold out {eval_fraction:.0%}"
                " for evaluation - add images or pass --eval-source"
            )
        random.Random(seed).shuffle(train)
        evaluation, train = train[:count], train[count:]
    check_output_dir(output_dir)
    random.Random(seed + 1).shuffle(train)  # every shard holds every class
    jobs = shard_jobs(output_dir, "train", train, num_files)
    jobs += shard_jobs(output_dir, "eval", sorted(evaluation), None)
    convert(jobs, write_image_shard, workers, "import-images")
    return classes, manifest.index(output_dir)


def labelled_images(source):
    """([class names], [(path, label)]): folders in name order are the classes."""
    if not tf.io.gfile.isdir(source):
        raise ConversionError(f"{source} is not a directory - pass a folder of class folders")
    classes = sorted(
        name.rstrip("/")
        for name in tf.io.gfile.listdir(source)
        if tf.io.gfile.isdir(os.path.join(source, name))
    )
    num_classes = FEATURES.num_classes if FEATURES else None
    if num_classes is None:
        raise ConversionError(
            "import-images labels images by their folder: task.py's FEATURES must declare"
            " the label a ClassLabel"
        )
    if len(classes) != num_classes:
        raise ConversionError(
            f"{source} has {len(classes)} class folders, the task has {num_classes} classes -"
            " give one folder per class, or change the ClassLabel's class count in task.py"
        )
    images = [
        (os.path.join(source, name, file), label)
        for label, name in enumerate(classes)
        for file in sorted(tf.io.gfile.listdir(os.path.join(source, name)))
        if file.lower().endswith(IMAGE_SUFFIXES)
    ]
    if not images:
        raise ConversionError(f"{source} holds no images ({', '.join(IMAGE_SUFFIXES)})")
    return classes, images


def shard_jobs(output_dir, split, images, num_files):
    """The images dealt round-robin to `num_files` shards (default: about
    IMAGES_PER_SHARD each)."""
    count = min(num_files or -(-len(images) // IMAGES_PER_SHARD), len(images))
    return [
        (images[index::count], os.path.join(output_dir, shard_name(split, index, count)))
        for index in range(count)
    ]


def write_image_shard(images, target):
    """Each image decoded (a file that does not decode is named), and stored as
    its file's bytes when it is a JPEG, else encoded as one."""
    with tf.io.TFRecordWriter(target) as writer:
        for path, label in images:
            data = tf.io.read_file(path)
            try:
                image = tf.io.decode_image(data, channels=3, expand_animations=False)
            except tf.errors.InvalidArgumentError:
                raise ConversionError(
                    f"{path} does not decode as an image - re-encode it or remove it"
                ) from None
            writer.write(encode(data.numpy() if tf.io.is_jpeg(data) else image.numpy(), label))
