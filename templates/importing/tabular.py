

def import_csv(output_dir, train_files, eval_files, label_column="label", workers=None):
    """One shard per CSV file of `train_files` and `eval_files`, in `output_dir`,
    indexed; returns the manifest's splits."""
    if not train_files or not eval_files:
        raise ConversionError("give at least one training and one evaluation CSV file")
    for path in [*train_files, *eval_files]:  # every header, before any shard is written
        with open_csv(path) as handle:
            header_label_index(path, next(csv.reader(handle), None), label_column)
    check_output_dir(output_dir)
    jobs = [
        ((path, label_column), os.path.join(output_dir, shard_name(split, index, len(files))))
        for split, files in (("train", train_files), ("eval", eval_files))
        for index, path in enumerate(files)
    ]
    convert(jobs, write_csv_shard, workers)
    return manifest.index(output_dir)


def open_csv(path):
    try:
        return open(path, newline="", encoding="utf-8")  # noqa: SIM115 (the caller closes it)
    except OSError as err:
        raise ConversionError(f"cannot read {path}: {err.strerror} - check the path") from None


def write_csv_shard(source, target):
    path, label_column = source
    with open_csv(path) as handle, tf.io.TFRecordWriter(target) as writer:
        rows = csv.reader(handle)
        header = next(rows, None)
        label_at = header_label_index(path, header, label_column)
        for line, row in enumerate(rows, start=2):
            writer.write(encode(*example_of(path, line, header, row, label_at)))


def header_label_index(path, header, label_column):
    if not header:
        raise ConversionError(f"{path} is empty - it needs a header row and examples")
    if label_column not in header:
        raise ConversionError(
            f"{path} has no column {label_column!r} (its columns: {', '.join(header[:8])}"
            f"{', ...' if len(header) > 8 else ''}) - pass --label-column"
        )
    if [len(header) - 1] != list(INPUT_SHAPE):
        raise ConversionError(
            f"{path} has {len(header) - 1} feature columns, the task takes {list(INPUT_SHAPE)}"
            " - change NUM_FEATURES in task.py, or drop columns"
        )
    return header.index(label_column)


def example_of(path, line, header, row, label_at):
    """(features, label) of one CSV row, or a one-line error naming its line."""
    if len(row) != len(header):
        raise ConversionError(
            f"{path} line {line} has {len(row)} fields, the header {len(header)} - fix that row"
        )
    values = []
    for column, text in zip(header, row, strict=True):
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        # float() takes "nan" and "inf": a model normalized with them trains on NaN.
        if not math.isfinite(value):
            raise ConversionError(
                f"{path} line {line}: {text!r} in column {column!r} is not a finite number"
                " - fix that row"
            )
        values.append(value)
    label = values.pop(label_at)
    if label != int(label) or not 0 <= label < NUM_CLASSES:
        raise ConversionError(
            f"{path} line {line}: label {row[label_at]!r} is not a class in"
            f" 0..{NUM_CLASSES - 1} - fix that row, or NUM_CLASSES in task.py"
        )
    return np.array(values, np.float32), int(label)
