

SPLITS = ("train", "eval")
# CSV bytes per shard when --num-files is not given, and at most: a shard's rows
# are shuffled in memory, in each of --workers processes. An input of at most
# CSV_BYTES_PER_SHARD is converted in this process: starting TensorFlow in
# conversion processes would take longer than the conversion.
CSV_BYTES_PER_SHARD = 64 * 2**20
MAX_CSV_BYTES_PER_SHARD = 2**30
# The first pass writes a part per group of files and shard (and keeps a file
# open per shard): more would be slow to write and remove on a bucket. The files
# are grouped so that a split has at most half of these.
MAX_PARTS = 100_000
# Bytes read at a time from a CSV file on remote storage.
READ_BYTES = 4 * 2**20


def import_csv(
    output_dir,
    train_files,
    eval_files,
    label_column=None,
    workers=None,
    num_files=None,
    seed=0,
    for_workers=1,
):
    """The rows of `train_files` and `eval_files` (paths or globs, local or on any
    storage tf.io.gfile reads), shuffled (seeded) and dealt into shards in
    `output_dir` (`num_files` training shards; default: default_shards for
    `for_workers` training workers), indexed; returns the manifest's splits.
    The label is in `label_column` (default: the label field's name, LABEL_COLUMN).

    Two passes, each in parallel: every group of CSV files has its rows dealt to
    the split's shards as they are read (one process a group), then every
    shard's rows are shuffled in memory and written (one process a shard).
    Whatever order the files come in (sorted by label, by date), every shard
    holds an even share of every file, in random order: a training block mixes
    classes from the first batch.
    """
    if not train_files or not eval_files:
        raise ConversionError("give at least one training and one evaluation CSV file")
    label_column = label_column or LABEL_COLUMN
    train_files, eval_files = expand_globs(train_files), expand_globs(eval_files)
    for path in [*train_files, *eval_files]:  # every header, before any shard is written
        with open_csv(path) as handle:
            rows = csv.reader(handle)
            header = next(rows, None)
            label_at = header_label_index(path, header, label_column)
            first = next(rows, None)
            if first is None:
                raise ConversionError(f"{path} holds no rows - give it examples below its header")
            # The task takes the file's columns, or says which it lacks, now.
            example_of(path, 2, header, first, label_at)
    files = {"train": train_files, "eval": eval_files}
    train_bytes, eval_bytes = csv_bytes(train_files), csv_bytes(eval_files)
    shards = {
        "train": num_files or default_shards(train_bytes, for_workers),
        "eval": default_shards(eval_bytes),
    }
    check_shards(train_bytes, shards)
    if workers is None and train_bytes + eval_bytes <= CSV_BYTES_PER_SHARD:
        workers = 1
    check_output_dir(output_dir)
    deals, writes = [], []
    for split_index, split in enumerate(SPLITS):
        groups = file_groups(files[split], shards[split])
        # parts[shard][group]: where each group of files leaves its rows for each shard.
        parts = [
            [part_path(output_dir, split, shard, index) for index in range(len(groups))]
            for shard in range(shards[split])
        ]
        for index, group in enumerate(groups):
            source = (group, label_column, (seed, split_index, index))
            deals.append((source, [shard_parts[index] for shard_parts in parts]))
        for shard, shard_parts in enumerate(parts):
            target = os.path.join(output_dir, shard_name(split, shard, shards[split]))
            writes.append(((shard_parts, (seed, split_index, shard)), target))
    try:
        run_all(deal_rows, deals, workers, "import-csv: reading", "file groups")
        convert(writes, write_shuffled_shard, workers, "import-csv: writing")
    finally:
        for part in tf.io.gfile.glob(os.path.join(output_dir, ".part-*")):
            tf.io.gfile.remove(part)
    return manifest.index(output_dir)


def expand_globs(paths):
    """Each path, a glob (`gs://bucket/part-*.csv`, quoted from the shell) as the
    files it matches, in name order."""
    expanded = []
    for path in map(str, paths):
        if not any(character in path for character in "*?["):
            expanded.append(path)
            continue
        matched = sorted(tf.io.gfile.glob(path))
        if not matched:
            raise ConversionError(f"{path} matches no file - check the pattern")
        expanded.extend(matched)
    return expanded


def default_shards(size, for_workers=1):
    """Shards for `size` bytes of CSV: one per CSV_BYTES_PER_SHARD, at least one
    per training worker and a multiple of the workers, so that each worker reads
    whole files of its own (FILE sharding) and as many as the others."""
    shards = max(-(-size // CSV_BYTES_PER_SHARD), for_workers)
    return -(-shards // for_workers) * for_workers


def csv_bytes(paths):
    return sum(tf.io.gfile.stat(path).length for path in paths)


def file_groups(paths, shards):
    """`paths` in groups of consecutive files, each group a job of the first pass
    (a part per group and shard): as few files a group as keep a split's parts
    within half of MAX_PARTS (2,000 files into 200 shards: groups of 8)."""
    per_group = max(1, -(-len(paths) * shards // (MAX_PARTS // len(SPLITS))))
    return [paths[start : start + per_group] for start in range(0, len(paths), per_group)]


def check_shards(train_bytes, shards):
    """Refuse, in one line, shards whose rows would not fit in memory, and more
    shards than the first pass can write parts for; raise this process's limit
    of open files (the conversion processes inherit it) to what it needs."""
    per_shard = train_bytes / shards["train"]
    if per_shard > MAX_CSV_BYTES_PER_SHARD:
        least = -(-train_bytes // MAX_CSV_BYTES_PER_SHARD)
        raise ConversionError(
            f"--num-files {shards['train']} gives {per_shard / 2**20:.1f} MiB of CSV a shard,"
            f" whose rows are shuffled in memory - pass --num-files {least} or more"
        )
    if shards["train"] > MAX_PARTS // len(SPLITS):
        raise ConversionError(
            f"--num-files {shards['train']}: more shards than the {MAX_PARTS // len(SPLITS)}"
            " the conversion writes parts for - pass a smaller --num-files"
        )
    needed = max(shards.values()) + 64  # a writer per shard, and the process's own
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if needed > soft:
        if hard != resource.RLIM_INFINITY and needed > hard:
            raise ConversionError(
                f"{max(shards.values())} shards need {needed} open files, this machine allows"
                f" {hard} (ulimit -Hn) - pass a smaller --num-files, or raise the limit"
            )
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def part_path(output_dir, split, shard, index):
    """Where file `index` of `split` leaves its rows for `shard`."""
    return os.path.join(output_dir, f".part-{split}-{shard:05d}-{index:05d}.tfrecord")


def deal_rows(source, parts):
    """The rows of the CSV files `source` names, one file after another, as
    records, to the parts: each block of as many rows as parts dealt one a part,
    in an order drawn for the block. Every shard gets an even share of each
    file, and no period in a file's order (labels 0, 1, 2, 3, 0, 1, ...) lines up
    with the shards, as dealing in turn would: with 4 shards, each would hold
    one label."""
    paths, label_column, seed = source
    writers = [tf.io.TFRecordWriter(part) for part in parts]
    rng = np.random.default_rng(seed)
    block = []
    try:
        for path in paths:
            with open_csv(path) as handle:
                rows = csv.reader(handle)
                header = next(rows, None)
                label_at = header_label_index(path, header, label_column)
                for line, row in enumerate(rows, start=2):
                    record = encode(*example_of(path, line, header, row, label_at))
                    if not block:
                        block = list(rng.permutation(len(writers)))
                    writers[block.pop()].write(record)
    finally:
        for writer in writers:
            writer.close()


def write_shuffled_shard(source, target):
    """The records of the parts `source` names, in an order drawn from its seed,
    as the shard `target`."""
    parts, seed = source
    records = [record.numpy() for record in tf.data.TFRecordDataset(parts)]
    if not records:
        raise ConversionError(
            f"no rows for {os.path.basename(target).removeprefix('.partial-')}: the files"
            " hold fewer rows than shards - pass a smaller --num-files"
        )
    order = np.random.default_rng(seed).permutation(len(records))
    with tf.io.TFRecordWriter(target) as writer:
        for index in order:
            writer.write(records[index])


def open_csv(path):
    """A CSV file, local or on any storage tf.io.gfile reads (gs://, s3://, hdfs://)."""
    if "://" not in path:
        try:
            return open(path, newline="", encoding="utf-8")  # noqa: SIM115 (the caller closes it)
        except OSError as err:
            raise ConversionError(f"cannot read {path}: {err.strerror} - check the path") from None
    if not tf.io.gfile.exists(path):
        raise ConversionError(f"cannot read {path}: no such file - check the path")
    # Read in large pieces: GFile's own lines cost 5 times the parsing of a row.
    raw = io.BufferedReader(GFileBytes(tf.io.gfile.GFile(path, "rb")), READ_BYTES)
    return io.TextIOWrapper(raw, encoding="utf-8", newline="")


class GFileBytes(io.RawIOBase):
    """A tf.io.gfile file as the raw stream io's buffered readers read from."""

    def __init__(self, gfile):
        self.gfile = gfile

    def readable(self):
        return True

    def readinto(self, buffer):
        data = self.gfile.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self):
        self.gfile.close()
        super().close()


def header_label_index(path, header, label_column):
    if not header:
        raise ConversionError(f"{path} is empty - it needs a header row and examples")
    if label_column not in header:
        raise ConversionError(
            f"{path} has no column {label_column!r} (its columns: {', '.join(header[:8])}"
            f"{', ...' if len(header) > 8 else ''}) - pass --label-column"
        )
    return header.index(label_column)


def example_of(path, line, header, row, label_at):
    """(inputs, label) of one CSV row, as the task's format makes them
    (record_format.example_from_csv) and its label check takes them, or a
    one-line error naming its line."""
    if len(row) != len(header):
        raise ConversionError(
            f"{path} line {line} has {len(row)} fields, the header {len(header)} - fix that row"
        )
    features = dict(zip(header, row, strict=True))
    label = features.pop(header[label_at])
    try:
        inputs, label = example_from_csv(features, label)
    except ValueError as err:
        raise ConversionError(f"{path} line {line}: {err} - fix that row") from None
    # A NaN the task let through: a model normalized with it trains on NaN.
    for value in tf.nest.flatten((inputs, label)):
        value = np.asarray(value)
        if value.dtype.kind == "f" and not np.isfinite(value).all():
            raise ConversionError(
                f"{path} line {line}: a value that is not finite (nan or inf) in what"
                " the task made of it - fix that row"
            )
    values = np.asarray(label)
    problem = check_labels(values.min().item(), values.max().item())
    if problem is not None:
        raise ConversionError(f"{path} line {line}: {problem}")
    return inputs, label
