{%- if cookiecutter.task == "image" -%}
"""import-images: class folders become indexed shards every class is spread over;
a file that does not decode is named in one line and leaves no shard behind; a
model trains from the folders through the project's commands."""

import collections
import json
import math
import re

import pytest
import tensorflow as tf

from {{ cookiecutter.package_name }}.data.importing import ConversionError, import_images
from {{ cookiecutter.package_name }}.data.manifest import MANIFEST_NAME
from {{ cookiecutter.package_name }}.data.record_format import FEATURES
from {{ cookiecutter.package_name }}.task import sample_examples

# import-images takes a folder for each of the ClassLabel's classes.
NUM_CLASSES = FEATURES.num_classes

# Folder names in an order other than the sample task's labels: classes are
# numbered by name, as image_dataset_from_directory numbers them.
CLASS_NAMES = [f"class_{chr(ord('a') + index)}" for index in range(NUM_CLASSES)]
PER_CLASS = 8


def class_folders(root, per_class=PER_CLASS):
    """`per_class` images a class, PNG and JPEG mixed."""
    images, _ = sample_examples(NUM_CLASSES * per_class, seed=4)
    for label, name in enumerate(CLASS_NAMES):
        (root / name).mkdir(parents=True)
        for index in range(per_class):
            image = images[label * per_class + index]
            if index % 2:
                path, data = root / name / f"{index}.png", tf.io.encode_png(image)
            else:
                path, data = root / name / f"{index}.JPG", tf.io.encode_jpeg(image)
            tf.io.write_file(str(path), data)


def stored_labels(path):
    records = tf.data.TFRecordDataset(str(path))
    return [
        int(
            tf.io.parse_single_example(
                record, {"image/class/label": tf.io.FixedLenFeature([], tf.int64)}
            )["image/class/label"]
        )
        for record in records
    ]


def test_class_folders_become_indexed_shards_holding_every_class(tmp_path):
    class_folders(tmp_path / "images")
    output = tmp_path / "data"
    classes, splits = import_images(
        str(output), str(tmp_path / "images"), eval_fraction=0.25, num_files=2, workers=2
    )
    assert classes == CLASS_NAMES
    total = NUM_CLASSES * PER_CLASS
    assert sum(shard.records for shard in splits["eval"]) == total // 4
    assert sum(shard.records for shard in splits["train"]) == total - total // 4
    assert (output / MANIFEST_NAME).exists()
    counts = collections.Counter()
    for shard in splits["train"] + splits["eval"]:
        labels = stored_labels(shard.path)
        counts.update(labels)
        if shard in splits["train"]:
            assert len(set(labels)) > 1, "a shard of one class: the files were not shuffled"
    # Every image once, under its folder's label.
    assert counts == {label: PER_CLASS for label in range(NUM_CLASSES)}
    assert not [path for path in output.iterdir() if path.name.startswith(".partial")]
    # JPEG files stored as they are (no second lossy encoding), PNGs as JPEGs.
    stored = [image for shard in splits["train"] + splits["eval"] for image in images_in(shard)]
    jpegs = [path.read_bytes() for path in (tmp_path / "images").glob("*/*.JPG")]
    assert len(jpegs) == len(stored) // 2 and all(jpeg in stored for jpeg in jpegs)
    assert all(tf.io.is_jpeg(image) for image in stored)


def images_in(shard):
    """The encoded images of `shard`, as bytes."""
    feature = {"image/encoded": tf.io.FixedLenFeature([], tf.string)}
    return [
        tf.io.parse_single_example(record, feature)["image/encoded"].numpy()
        for record in tf.data.TFRecordDataset(shard.path)
    ]


def test_a_file_that_does_not_decode_is_named_and_no_shard_is_left(tmp_path):
    class_folders(tmp_path / "images")
    broken = tmp_path / "images" / CLASS_NAMES[1] / "broken.jpg"
    broken.write_bytes(b"not an image")
    output = tmp_path / "data"
    with pytest.raises(ConversionError, match=rf"^{broken} does not decode as an image - "):
        import_images(str(output), str(tmp_path / "images"), num_files=3, workers=1)
    assert list(output.iterdir()) == []


def test_a_tree_with_another_class_count_is_refused_in_one_line(tmp_path):
    class_folders(tmp_path / "images")
    (tmp_path / "images" / "class_z").mkdir()
    with pytest.raises(ConversionError, match=rf"has {NUM_CLASSES + 1} class folders, the task"):
        import_images(str(tmp_path / "data"), str(tmp_path / "images"))
    assert not (tmp_path / "data").exists()


def test_the_import_images_command_prints_the_classes(tmp_path, cli):
    class_folders(tmp_path / "images", per_class=2)
    result = cli(
        "import-images",
        "--source",
        str(tmp_path / "images"),
        "--output-dir",
        str(tmp_path / "data"),
        "--eval-fraction",
        "0.25",
        "--workers",
        "1",
    )
    assert result.returncode == 0, result.stderr
    assert f"classes 0..{NUM_CLASSES - 1}: {', '.join(CLASS_NAMES)}" in result.stdout
    # Every image in one of the splits, whatever the task's class count.
    split_line = r"^(train|eval): 1 files, (\d+) records"
    counts = {split: int(count) for split, count in re.findall(split_line, result.stdout, re.M)}
    assert sum(counts.values()) == 2 * NUM_CLASSES and counts["eval"] > 0, result.stdout
    again = cli(
        "import-images",
        "--source",
        str(tmp_path / "images"),
        "--output-dir",
        str(tmp_path / "data"),
    )
    assert again.returncode == 2
    assert again.stderr.count("\n") == 1 and "already holds shards" in again.stderr
    assert sorted(path.name for path in (tmp_path / "data").iterdir()) == [
        "eval-00000-of-00001.tfrecord",
        MANIFEST_NAME,
        "train-00000-of-00001.tfrecord",
    ]


def test_a_model_trains_from_its_image_folders_through_the_commands(tmp_path, cli):
    # Class folders as a user has them: import-images, then train and evaluate.
    class_folders(tmp_path / "images", per_class=16)
    data = str(tmp_path / "data")
    # fmt: off
    imported = cli(
        "import-images", "--source", str(tmp_path / "images"), "--output-dir", data,
        "--eval-fraction", "0.25", "--workers", "1",
    )
    # fmt: on
    assert imported.returncode == 0, imported.stderr
    [train_records] = re.findall(r"^train: \d+ files, (\d+) records", imported.stdout, re.M)
    # fmt: off
    trained = cli(
        "train", "--data-dir", data, "--model-dir", str(tmp_path / "run"), "--epochs", "2",
        "--per-replica-batch-size", "16", "--summary-json", str(tmp_path / "summary.json"),
    )
    # fmt: on
    assert trained.returncode == 0, trained.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["global_step"] == 2 * (int(train_records) // 16), summary
    assert math.isfinite(summary["final_loss"]) and math.isfinite(summary["eval_metric"])
    # The model's batch normalization, checked held out at the end of the run.
    assert summary["batch_norm_losses"] is not None, summary
{%- else -%}
"""import-csv: CSV files become indexed shards holding exactly their rows; a bad
row is named in one line and leaves no shard behind. The files hold the task's
own sample examples, laid out as its FEATURES say a CSV row holds them."""

import collections
import csv
import io
import json
import math
import re
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from conftest import each_example, encoded

from {{ cookiecutter.package_name }}.data import importing
from {{ cookiecutter.package_name }}.data.importing import ConversionError, convert, import_csv
from {{ cookiecutter.package_name }}.data.manifest import MANIFEST_NAME, in_label_order
from {{ cookiecutter.package_name }}.data.record_format import FEATURES, LABEL_SHAPE, check_labels
from {{ cookiecutter.package_name }}.task import sample_examples

if FEATURES is None:
    pytest.skip(
        "the task turns a CSV row into an example itself (no FEATURES)", allow_module_level=True
    )
# The first input field of several values that names no columns: one column a
# value, named after no field, and they fill it (as the sample's 20 numbers fill
# 'features'). None: each field's columns are named.
SPREAD = next(
    (name for name, field in FEATURES.inputs.items() if not field.columns and field.size > 1),
    None,
)
# Each input field's CSV columns: a Tensor's `columns`, SPREAD's, or one named
# after the field (several values in it, separated by spaces).
COLUMNS = {
    name: field.columns
    or ([f"{name}_{index}" for index in range(field.size)] if name == SPREAD else [name])
    for name, field in FEATURES.inputs.items()
}
# The label's column is named after its field: import-csv's default --label-column.
HEADER = [*(column for columns in COLUMNS.values() for column in columns), FEATURES.label_name]
# A column holding one number of a float input, which the bad-number cases spoil
# (None: the task has none).
NUMBER_COLUMN = next(
    (
        columns[0]
        for name, columns in COLUMNS.items()
        if FEATURES.inputs[name].dtype.is_floating and len(columns) == FEATURES.inputs[name].size
    ),
    None,
)
# A finite scalar label the task refuses (a classifier's: a class it does not
# have), if any.
REFUSED_LABEL = next(
    (label for label in (-1.0, 0.5) if LABEL_SHAPE == () and check_labels(label, label)), None
)


def text_of(value):
    """One value as a CSV cell holds it: a float that reads back exactly."""
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, str):
        return value
    if isinstance(value, np.floating):
        return repr(float(value))
    return str(int(value))


def cells(values, columns):
    """A field's values in its columns: one a column, or all in one separated by spaces."""
    texts = [text_of(value) for value in np.ravel(values)]
    return texts if len(texts) == len(columns) else [" ".join(texts)]


def csv_rows(examples):
    """The header, then each example's row."""
    rows = [HEADER]
    for inputs, label in examples:
        by_name = FEATURES.inputs_by_name(inputs)
        row = [cell for name, columns in COLUMNS.items() for cell in cells(by_name[name], columns)]
        rows.append([*row, *cells(label, [FEATURES.label_name])])
    return rows


def csv_text(examples=None, rows=None):
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerows(rows or csv_rows(examples))
    return text.getvalue()


def write_csv(path, examples=None, rows=None):
    path.write_text(csv_text(examples, rows))
    return path


def examples(count, seed):
    """The task's sample examples, as [(inputs, label)]."""
    return each_example(*sample_examples(count, seed))


def by_label(examples):
    """Sorted by label, as exports often are (stable)."""
    return sorted(examples, key=lambda example: np.ravel(example[1]).tolist())


def labels_of(examples):
    return np.array([label for _, label in examples])


def read_shards(shards):
    """The examples the shards hold, as the task's records parse."""
    records = tf.data.TFRecordDataset([shard.path for shard in shards]).batch(1000)
    return [example for batch in records for example in each_example(*FEATURES.parse(batch))]


def same_examples(read, written):
    """The same examples, each as often (records compared as the task encodes them)."""
    return collections.Counter(encoded(read)) == collections.Counter(encoded(written))


def test_csv_files_become_shuffled_indexed_shards_holding_their_rows(tmp_path):
    # Sorted by label, as exports often are: 120 training rows in 2 files.
    rows = examples(150, seed=2)
    ordered = by_label(rows[:120])
    train = [
        write_csv(tmp_path / "part-1.csv", ordered[:80]),
        write_csv(tmp_path / "part-2.csv", ordered[80:]),
    ]
    evaluation = [write_csv(tmp_path / "eval.csv", rows[120:])]
    output = tmp_path / "data"
    splits = import_csv(str(output), train, evaluation, workers=2, num_files=3, seed=7)
    assert (output / MANIFEST_NAME).exists()
    assert [path.name for path in output.iterdir() if path.name.startswith(".")] == []
    # An even share of every file in each shard: 80 / 3 and 40 / 3, give or take one.
    assert all(39 <= shard.records <= 41 for shard in splits["train"]), splits["train"]
    # Every value exactly, each row once.
    assert same_examples(read_shards(splits["train"]), ordered)
    # Shuffled: no shard's records follow the order of their labels.
    assert in_label_order(labels_of(ordered))
    for shard in splits["train"]:
        shard_labels = labels_of(read_shards([shard]))
        assert not in_label_order(shard_labels), shard_labels
    # The order is the seed's: the same seed gives the same shards, whatever the
    # processes (records compared parsed: a protobuf map's bytes may be ordered
    # differently in another process).
    again = import_csv(str(tmp_path / "again"), train, evaluation, workers=1, num_files=3, seed=7)
    for shard, same in zip(splits["train"], again["train"], strict=True):
        assert encoded(read_shards([shard])) == encoded(read_shards([same]))


def test_rows_in_a_period_that_divides_the_shard_count_are_not_aliased(tmp_path):
    # A stratified export: the rows cycle through 4 groups (here, quarters of
    # the label order), and there are 4 shards. Dealt in turn, each shard held
    # one group: one label per shard of a classification.
    ordered = by_label(examples(160, seed=4))
    cycled = [ordered[quarter * 40 + row] for row in range(40) for quarter in range(4)]
    path = write_csv(tmp_path / "stratified.csv", cycled)
    splits = import_csv(str(tmp_path / "data"), [path], [path], workers=1, num_files=4)
    quarter_of = {record: rank // 40 for rank, record in enumerate(encoded(ordered))}
    for shard in splits["train"]:
        assert shard.records == 40
        quarters = {quarter_of[record] for record in encoded(read_shards([shard]))}
        assert quarters == {0, 1, 2, 3}, (shard.path, quarters)


def test_shards_too_large_or_too_many_parts_are_refused_before_any_is_written(
    tmp_path, monkeypatch
):
    path = write_csv(tmp_path / "train.csv", examples(40, seed=2))
    output = tmp_path / "data"
    # A shard's rows are shuffled in memory: its size is bounded.
    limit = path.stat().st_size // 3
    monkeypatch.setattr(importing, "MAX_CSV_BYTES_PER_SHARD", limit)
    least = -(-path.stat().st_size // limit)
    too_large = rf"^--num-files 2 gives [\d.]+ MiB of CSV a shard, .* --num-files {least} or more$"
    with pytest.raises(ConversionError, match=too_large):
        import_csv(str(output), [path], [path], workers=1, num_files=2)
    monkeypatch.setattr(importing, "MAX_CSV_BYTES_PER_SHARD", 2**30)
    monkeypatch.setattr(importing, "MAX_PARTS", 10)  # 5 a split
    too_many = r"^--num-files 6: more shards than the 5 the conversion writes parts for - pass"
    with pytest.raises(ConversionError, match=too_many):
        import_csv(str(output), [path], [path], workers=1, num_files=6)
    assert not output.exists()


def test_many_files_are_read_in_groups_that_keep_the_parts_within_the_limit(tmp_path, monkeypatch):
    # 2,000 files into 200 shards would be 400,000 parts, a part per file and shard.
    monkeypatch.setattr(importing, "MAX_PARTS", 12)  # 6 a split
    rows = examples(60, seed=3)
    paths = [write_csv(tmp_path / f"part-{index}.csv", rows[index::6]) for index in range(6)]
    assert importing.file_groups(paths, 3) == [paths[:3], paths[3:]]  # 2 groups x 3 shards
    splits = import_csv(str(tmp_path / "data"), paths, paths[:1], workers=1, num_files=3)
    assert [shard.records for shard in splits["train"]] == [20, 20, 20]
    assert same_examples(read_shards(splits["train"]), rows)


def test_the_default_shards_follow_the_data_and_the_workers_they_feed():
    mib = 2**20
    assert importing.default_shards(300 * mib) == 5
    # 8 workers: a shard each, rather than 5 files and every worker reading them all.
    assert importing.default_shards(300 * mib, for_workers=8) == 8
    # 200 GB: 2,981 shards of 64 MiB, rounded up to a multiple of 16 workers.
    assert importing.default_shards(200 * 10**9, for_workers=16) == 2992
    assert importing.default_shards(0) == 1


def test_csv_files_on_other_storage_and_globs_import_in_this_process(tmp_path, monkeypatch):
    # tf.io.gfile's in-memory file system stands in for gs:// or s3://. A small
    # input is converted in this process: no conversion process starts.
    def no_processes(*args):
        raise AssertionError("a small input started conversion processes")

    monkeypatch.setattr(importing, "write_in_processes", no_processes)
    rows = examples(30, seed=5)
    for index in range(3):
        with tf.io.gfile.GFile(f"ram://csv/train-{index}.csv", "w") as handle:
            handle.write(csv_text(rows[index * 10 : index * 10 + 10]))
    splits = import_csv(
        str(tmp_path / "data"), ["ram://csv/train-*.csv"], ["ram://csv/train-0.csv"], num_files=2
    )
    assert same_examples(read_shards(splits["train"]), rows)
    with pytest.raises(ConversionError, match=r"^ram://csv/eval-\*.csv matches no file - check"):
        import_csv(str(tmp_path / "other"), ["ram://csv/train-0.csv"], ["ram://csv/eval-*.csv"])
    missing = r"^cannot read ram://csv/gone.csv: no such file - check the path$"
    with pytest.raises(ConversionError, match=missing):
        import_csv(str(tmp_path / "other"), ["ram://csv/gone.csv"], ["ram://csv/train-0.csv"])


def test_more_shards_than_rows_is_refused_in_one_line(tmp_path):
    path = write_csv(tmp_path / "small.csv", examples(4, seed=2))
    output = tmp_path / "data"
    with pytest.raises(ConversionError, match=r"^no rows for train-00\d{3}-of-00008.tfrecord: the"):
        import_csv(str(output), [path], [path], workers=1, num_files=8)
    assert list(output.iterdir()) == []


def without_a_number(reason):
    return pytest.mark.skipif(NUMBER_COLUMN is None, reason=reason)


@pytest.mark.parametrize(
    "bad_row, message",
    [
        pytest.param(
            "abc",
            rf"line 5: 'abc' in column '{NUMBER_COLUMN}' is not a number - fix that row",
            marks=without_a_number("the task has no column of one float"),
        ),
        pytest.param(
            "nan",
            rf"line 5: 'nan' in column '{NUMBER_COLUMN}' is not a finite number - fix that row",
            marks=without_a_number("the task has no column of one float"),
        ),
        pytest.param(
            "-inf",
            rf"line 5: '-inf' in column '{NUMBER_COLUMN}' is not a finite number - fix that row",
            marks=without_a_number("the task has no column of one float"),
        ),
        # The task's words: for the sample task, "'nan' in the label is not a finite number".
        ("nan label", r"line 5: 'nan' in .* - fix that row"),
        pytest.param(
            "label",
            None,
            marks=pytest.mark.skipif(REFUSED_LABEL is None, reason="the task takes any label"),
        ),
        ("short", rf"line 5 has {len(HEADER) - 1} fields, the header {len(HEADER)}"),
    ],
)
def test_a_bad_row_is_named_in_one_line_and_no_shard_is_left(tmp_path, bad_row, message):
    rows = examples(10, seed=2)
    good = write_csv(tmp_path / "good.csv", rows)
    lines = csv_rows(rows)
    fields = lines[4]
    if bad_row in ("abc", "nan", "-inf"):
        fields[HEADER.index(NUMBER_COLUMN)] = bad_row
    elif bad_row == "nan label":
        fields[-1] = "nan"
    elif bad_row == "label":
        fields[-1] = repr(REFUSED_LABEL)
        message = re.escape(f"line 5: {check_labels(REFUSED_LABEL, REFUSED_LABEL)}")
    else:
        fields.pop()
    path = write_csv(tmp_path / "bad.csv", rows=lines)
    output = tmp_path / "data"
    with pytest.raises(ConversionError, match=rf"^{path} {message}"):
        import_csv(str(output), [good, path], [good], workers=1)
    assert list(output.iterdir()) == []


@pytest.mark.skipif(SPREAD is None, reason="every input field is named by its columns")
def test_a_column_more_than_the_field_left_holds_is_refused_in_one_line(tmp_path):
    # The columns no field names fill the one field left: an extra one is too many.
    header, *rows = csv_rows(examples(4, seed=2))
    widened = [[*header[:-1], "extra", header[-1]], *([*row[:-1], "0.5", row[-1]] for row in rows)]
    path = write_csv(tmp_path / "wide.csv", rows=widened)
    size = FEATURES.inputs[SPREAD].size
    too_many = rf"line 2: {size + 1} columns for '{SPREAD}', which holds {size}"
    with pytest.raises(ConversionError, match=too_many):
        import_csv(str(tmp_path / "data"), [path], [path])


def test_a_label_column_the_files_lack_is_refused_in_one_line(tmp_path):
    path = write_csv(tmp_path / "train.csv", examples(4, seed=2))
    lacking = rf"has no column 'class' \(its columns: {re.escape(HEADER[0])}"
    with pytest.raises(ConversionError, match=lacking):
        import_csv(str(tmp_path / "data"), [path], [path], label_column="class")


def write_slowly(source, target):
    """A shard writer for convert(): shard 0 fails at once, each other one takes
    0.5 s and leaves a mark in the folder `source` names."""
    index, marks = source
    if index == 0:
        raise ConversionError("shard 0 does not convert")
    time.sleep(0.5)
    Path(marks, f"written-{index}").touch()
    Path(target).write_text(str(index))


def test_the_first_failure_stops_the_conversion_and_leaves_no_shard(tmp_path):
    # On ImageNet, every shard after a bad image was converted before its error.
    marks, output = tmp_path / "marks", tmp_path / "data"
    marks.mkdir()
    output.mkdir()
    jobs = [((index, str(marks)), str(output / f"shard-{index}")) for index in range(16)]
    with pytest.raises(ConversionError, match="^shard 0 does not convert$"):
        convert(jobs, write_slowly, workers=2)
    assert list(output.iterdir()) == []
    # Those running or already queued for a process (2 workers, and the pool's
    # queue of 3) finish; the rest never start.
    assert len(list(marks.iterdir())) <= 5


def test_the_import_csv_command_writes_and_refuses_in_one_line(tmp_path, cli):
    path = write_csv(tmp_path / "train.csv", examples(20, seed=2))
    output = str(tmp_path / "data")
    arguments = ["--train", str(path), "--eval", str(path), "--output-dir", output]
    result = cli("import-csv", *arguments, "--workers", "2")
    assert result.returncode == 0, result.stderr
    assert "train: 1 files, 20 records" in result.stdout
    # The conversion processes start TensorFlow as quietly as the command.
    assert result.stderr == ""
    again = cli("import-csv", *arguments, "--workers", "1")
    assert again.returncode == 2
    assert again.stderr.count("\n") == 1 and "already holds shards" in again.stderr


def test_a_model_trains_from_its_csv_through_the_commands(tmp_path, cli):
    # The task's own examples as a user's CSV: import-csv, then train and evaluate.
    rows = examples(256, seed=2)
    train = write_csv(tmp_path / "train.csv", rows[:192])
    evaluation = write_csv(tmp_path / "eval.csv", rows[192:])
    data = str(tmp_path / "data")
    files = ["--train", str(train), "--eval", str(evaluation)]
    imported = cli("import-csv", *files, "--output-dir", data)
    assert imported.returncode == 0, imported.stderr
    model_dir = tmp_path / "run"
    # fmt: off
    trained = cli(
        "train", "--data-dir", data, "--model-dir", str(model_dir), "--epochs", "2",
        "--per-replica-batch-size", "16", "--summary-json", str(tmp_path / "summary.json"),
    )
    # fmt: on
    assert trained.returncode == 0, trained.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    # Both epochs of 192 rows, in batches of 16 (12 steps each), and every
    # evaluation row counted.
    assert summary["global_step"] == 24, summary
    assert math.isfinite(summary["final_loss"]) and math.isfinite(summary["eval_metric"])
{%- endif %}
