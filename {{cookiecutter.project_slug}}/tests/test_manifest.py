"""The manifest: `index` reads every record once; planning reads only the manifest
and refuses, in one line naming the file, anything that would train wrongly."""

import concurrent.futures
import json
{%- if cookiecutter.task == "image" %}
import re
{%- endif %}
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from conftest import (
    assert_same_statistics,
{%- if cookiecutter.task == "image" %}
    truncated_jpeg_record,
{%- else %}
    each_example,
{%- endif %}
    write_shards,
)

from {{ cookiecutter.package_name }} import is_transient
from {{ cookiecutter.package_name }}.config import TrainConfig
from {{ cookiecutter.package_name }}.data import manifest, statistics
from {{ cookiecutter.package_name }}.data.manifest import (
    DataUnavailable,
    ManifestError,
    first_corrupt_file,
    in_label_order,
    index,
    load,
    sorted_by_label,
)
{%- if cookiecutter.task == "tabular" %}
from {{ cookiecutter.package_name }}.data.pipeline import ArraySource
{%- endif %}
from {{ cookiecutter.package_name }}.data.record_format import (
    FEATURES,
{%- if cookiecutter.task == "tabular" %}
    INPUT_VALUES,
{%- endif %}
    check_labels,
    encode,
    parse_batch,
)
from {{ cookiecutter.package_name }}.data.sources import load_sources, make_data
from {{ cookiecutter.package_name }}.data.tfrecords import write_split
from {{ cookiecutter.package_name }}.task import sample_examples, statistics_from
{%- if cookiecutter.task == "tabular" %}
from {{ cookiecutter.package_name }}.toolkit import features
{%- endif %}

# The classes of a ClassLabel (None: the task's labels are not classes).
NUM_CLASSES = FEATURES.num_classes
{% if cookiecutter.task == "image" -%}
# The sample's images' shape, which `index` records.
SHAPE = sample_examples(1, seed=0)[0].shape[1:]


def load_dir(path, label_offset=0):
    return load(str(path), label_offset)[0]


def example(label=None):
    return np.zeros(SHAPE, "uint8"), 1 if label is None else label
{%- else -%}
SHAPE = tuple(INPUT_VALUES.values())
# The first input of numbers, which the tests give a value too many (None: none).
NUMBERS = next(
    (name for name, field in FEATURES.inputs.items() if isinstance(field, features.Tensor)), None
)


def load_dir(path):
    return load(str(path))[0]


def example(label=None, more_values=0):
    """The sample's first example (with `label`), its NUMBERS input `more_values` longer."""
    [(inputs, sample_label)] = each_example(*sample_examples(1, seed=0))
    if more_values:
        longer = np.zeros(INPUT_VALUES[NUMBERS] + more_values, "float32")
        inputs = longer if len(FEATURES.inputs) == 1 else {**inputs, NUMBERS: longer}
    return inputs, sample_label if label is None else label
{%- endif %}


def flip_a_byte(path):
    """Corrupt a record without changing the file's size."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def write_records(path, rows):
    with tf.io.TFRecordWriter(str(path)) as writer:
        for features, label in rows:
            writer.write(encode(features, label))


@pytest.fixture
def data(tmp_path):
    make_data(tmp_path, num_files=2, examples=40)  # train: 2 files of 20, eval: 1 of 10
    return tmp_path


def test_make_data_writes_a_manifest_of_every_shard(data):
    written = json.loads((data / "manifest.json").read_text())
    train = written["splits"]["train"]
    assert train["records"] == 40
    assert [entry["file"] for entry in train["files"]] == [
        "train-00000-of-00002.tfrecord",
        "train-00001-of-00002.tfrecord",
    ]
    first = train["files"][0]
    assert first["records"] == 20
    assert first["bytes"] == (data / first["file"]).stat().st_size
    assert first["feature_shape"] == list(SHAPE)
    assert first["label_min"] <= first["label_max"]
    assert check_labels(first["label_min"], first["label_max"]) is None
    assert written["splits"]["eval"]["records"] == 10


def test_index_stores_the_statistics_of_the_training_records_as_training_reads_them(tmp_path):
    examples = sample_examples(300, seed=4)
    write_split(tmp_path, "train", *examples, num_files=3)
    write_split(tmp_path, "eval", *sample_examples(10, seed=5), num_files=1)
    index(str(tmp_path), threads=2)
    stored = json.loads((tmp_path / "manifest.json").read_text())["statistics"]
    # Every training record parsed in one batch, as evaluation parses them: the
    # sums do not depend on the files or the batches index read them in.
    paths = sorted(str(path) for path in tmp_path.glob("train-*"))
    records = tf.data.TFRecordDataset(paths).batch(1000).get_single_element()
    references = [statistics_from(statistics.summarize([parse_batch(records)]))]
{%- if cookiecutter.task == "tabular" %}
    # The features are stored as they are: the arrays' statistics, too.
    references.append(ArraySource(*examples).statistics())
{%- endif %}
    for reference in references:
        assert_same_statistics(stored, reference)


def test_planning_reads_the_manifest_not_the_records(data):
    # A corrupt record of the same size is not seen: no record is read to plan.
    flip_a_byte(data / "train-00000-of-00002.tfrecord")
    splits = load_dir(data)
    assert [shard.records for shard in splits["train"]] == [20, 20]


def test_existing_shards_need_index_first(tmp_path):
    write_split(tmp_path, "train", *np_examples(30), num_files=3)
    write_split(tmp_path, "eval", *np_examples(5), num_files=1)
    with pytest.raises(ManifestError, match=r"^no manifest.json in .* - run `\S+ index --data-dir"):
        load_dir(tmp_path)
    indexed = index(str(tmp_path), threads=2)
    assert [shard.records for shard in indexed["train"]] == [10, 10, 10]
    assert [shard.records for shard in load_dir(tmp_path)["eval"]] == [5]


def np_examples(count, label=None):
    """`count` copies of example(label), as arrays of them."""
    return tf.nest.map_structure(lambda value: np.stack([value] * count), example(label))


def test_missing_data_directory_is_refused(tmp_path):
    with pytest.raises(ManifestError, match="does not exist - create it with `.* make-data"):
        load_dir(tmp_path / "nope")


def test_a_data_directory_whose_storage_does_not_answer_is_not_called_missing(
    tmp_path, monkeypatch
):
    # tf.io.gfile.isdir answers False for any error: "does not exist" (exit 2, for
    # good) for storage that failed this time.
    def unavailable(path):
        raise tf.errors.UnavailableError(None, None, f"{path}: connection reset")

    monkeypatch.setattr(tf.io.gfile, "stat", unavailable)
    with pytest.raises(DataUnavailable) as failed:
        load(str(tmp_path))
    assert is_transient(failed.value)  # exit 142, and not a lost peer's UnavailableError
    assert str(failed.value) == (
        f"the storage of the data directory {tmp_path} did not answer ({tmp_path}:"
        " connection reset) - restarting the job tries again"
    )


def test_a_checksum_error_that_no_file_confirms_is_not_called_bad_data(data_dir):
    # Every file reads: a checksum that failed this time (the storage, the network)
    # is left to stand, and retried, not reported as a corrupt record for good.
    train, _ = load_sources(TrainConfig(data_dir=str(data_dir)))
    scanned = []
    failed = tf.errors.DataLossError(None, None, "corrupted record at 1234")
    assert train.read_error(failed, 0, 5, lambda: scanned.append(1)) is None
    assert scanned  # the scan told the watchdog of its progress
    assert is_transient(failed)


def test_directory_without_shards_cannot_be_indexed(tmp_path):
    (tmp_path / "train.csv").write_text("not a shard")
    names = r"\(files named train-\*.tfrecord or train-\?\?\?\?\?-of-\?\?\?\?\?\)"
    refused = rf"^no train shards in \S+ {names} - name them so, pass --train-files with"
    with pytest.raises(ManifestError, match=refused):
        index(str(tmp_path))


def test_imagenet_shard_names_train_as_they_are(tmp_path):
    # tensorflow/models' ImageNet converter: no suffix, "validation" for the eval split.
    shards = {"train-00000-of-00002": 3, "train-00001-of-00002": 2, "validation-00000-of-00001": 4}
    for name, count in shards.items():
        write_records(tmp_path / name, [example()] * count)
    index(str(tmp_path))
    splits = load_dir(tmp_path)
    assert [(Path(s.path).name, s.records) for s in splits["train"]] == [
        ("train-00000-of-00002", 3),
        ("train-00001-of-00002", 2),
    ]
    assert [(Path(s.path).name, s.records) for s in splits["eval"]] == [
        ("validation-00000-of-00001", 4)
    ]
    # A shard of that naming added later is not silently left out.
    write_records(tmp_path / "train-00002-of-00003", [example()])
    with pytest.raises(ManifestError, match=r"train-00002-of-00003 is not in manifest.json"):
        load_dir(tmp_path)


def test_index_takes_the_shard_names_it_is_given_and_the_manifest_keeps_them(tmp_path, cli):
    write_records(tmp_path / "part-0.rec", [example()] * 3)
    write_records(tmp_path / "holdout.rec", [example()] * 2)
    patterns = ["--train-files", "part-*.rec", "--eval-files", "holdout.rec", "missing-*.rec"]
    result = cli("index", "--data-dir", str(tmp_path), *patterns)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("train: 1 files, 3 records, ")
    splits = load_dir(tmp_path)
    assert [shard.records for shard in splits["eval"]] == [2]
    # train checks the listing against the same patterns: a new part is refused.
    write_records(tmp_path / "part-1.rec", [example()])
    with pytest.raises(ManifestError, match=r"part-1.rec is not in manifest.json"):
        load_dir(tmp_path)


def test_an_empty_file_is_refused_by_index(data):
    (data / "train-00001-of-00002.tfrecord").write_bytes(b"")
    with pytest.raises(ManifestError, match=r"train-00001-of-00002.tfrecord is empty"):
        index(str(data))


def test_a_corrupt_file_is_named_by_index(data):
    flip_a_byte(data / "train-00000-of-00002.tfrecord")
    with pytest.raises(
        ManifestError, match=r"train-00000-of-00002.tfrecord is corrupt \(corrupted record at \d+\)"
    ):
        index(str(data))


def test_records_that_are_not_examples_are_refused_by_index(data):
    with tf.io.TFRecordWriter(str(data / "train-00001-of-00002.tfrecord")) as writer:
        writer.write(b"not a tf.train.Example")
    with pytest.raises(ManifestError, match="train-00001-of-00002.tfrecord does not hold records"):
        index(str(data))


{%- if cookiecutter.task == "tabular" %}


without_numbers = pytest.mark.skipif(NUMBERS is None, reason="the task has no input of numbers")


@without_numbers
def test_records_of_mixed_lengths_are_refused_by_index(data):
    rows = [example(), example(more_values=1)]
    write_records(data / "train-00001-of-00002.tfrecord", rows)
    size = INPUT_VALUES[NUMBERS]
    lengths = rf"holds records of {size} and of {size + 1} '{NUMBERS}' values"
    with pytest.raises(ManifestError, match=lengths):
        index(str(data))


@without_numbers
def test_inputs_of_another_shape_are_refused_before_training(data, monkeypatch):
    for shard in data.glob("*.tfrecord"):
        write_records(shard, [example(more_values=1)] * 4)
    index(str(data))
    size = INPUT_VALUES[NUMBERS]
    shape = rf"00002.tfrecord holds {size + 1} '{NUMBERS}' values a record, the model takes {size}"
    with pytest.raises(ManifestError, match=shape):
        load_dir(data)
    # Their statistics could not be learned (they do not parse as the model
    # takes them): with the shape changed and no new index, that is the error.
    monkeypatch.setattr(manifest, "INPUT_VALUES", {**INPUT_VALUES, NUMBERS: size + 1})
    with pytest.raises(ManifestError, match="has no statistics of the training data"):
        load_dir(data)


{%- else %}


def test_records_that_are_not_jpeg_images_are_refused_by_index(data):
    record = tf.train.Example(
        features=tf.train.Features(
            feature={
                "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"png?"])),
                "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[1])),
            }
        )
    )
    with tf.io.TFRecordWriter(str(data / "train-00001-of-00002.tfrecord")) as writer:
        writer.write(record.SerializeToString())
    with pytest.raises(ManifestError, match="train-00001-of-00002.tfrecord does not hold records"):
        index(str(data))


def test_a_truncated_jpeg_is_refused_by_index_naming_its_file_and_record(tmp_path):
    write_split(tmp_path, "eval", *np_examples(2), num_files=1)
    shard = tmp_path / "train-00000-of-00001.tfrecord"
    with tf.io.TFRecordWriter(str(shard)) as writer:
        for record in [encode(*example()), encode(*example()), truncated_jpeg_record()]:
            writer.write(record)
    refused = (
        rf"^{re.escape(str(shard))} record 2 holds a JPEG that does not decode \(truncated or"
        r" corrupt\) - re-encode that image or drop the record, then run `\S+ index --data-dir"
        rf" {re.escape(str(tmp_path))}`$"
    )
    with pytest.raises(ManifestError, match=refused):
        index(str(tmp_path))
    assert not list(tmp_path.glob("manifest.json*"))


def test_images_of_any_size_are_indexed_with_the_smallest(data):
    write_records(
        data / "train-00001-of-00002.tfrecord",
        [(np.zeros((48, 40, 3), "uint8"), 1), (np.zeros((36, 64, 3), "uint8"), 2)],
    )
    splits = index(str(data))
    assert splits["train"][1].feature_shape == (36, 40, 3)


@pytest.mark.skipif(NUM_CLASSES is None, reason="the task's labels are not classes")
def test_1_based_labels_need_a_label_offset(data):
    write_records(data / "train-00001-of-00002.tfrecord", [example(NUM_CLASSES)])
    index(str(data))
    one_based = r"not a class in 0\.\.\d+ - .*; labels stored from 1 train with --label-offset 1$"
    with pytest.raises(ManifestError, match=one_based):
        load_dir(data)
    zero = r"train-00000-of-00002.tfrecord \(--label-offset 1\): label -1 is not a class in 0"
    with pytest.raises(ManifestError, match=zero):
        load_dir(data, label_offset=1)  # make-data's labels start at 0
{%- endif %}


@pytest.mark.skipif(NUM_CLASSES is None, reason="the task's labels are not classes")
@pytest.mark.parametrize("label", [NUM_CLASSES, -1])
def test_a_label_outside_the_classes_is_refused_before_training(data, label):
    write_records(data / "train-00001-of-00002.tfrecord", [example(label)])
    index(str(data))
    outside = rf"00001-of-00002.tfrecord: label {label} is not a class in 0..{NUM_CLASSES - 1}"
    with pytest.raises(ManifestError, match=outside):
        load_dir(data)


def test_a_file_changed_after_index_is_refused(data):
    with open(data / "train-00000-of-00002.tfrecord", "ab") as handle:
        handle.write(b"more")
    changed = r"00000-of-00002.tfrecord has \d+ bytes, manifest.json says"
    with pytest.raises(ManifestError, match=changed):
        load_dir(data)


def test_a_listed_file_that_is_gone_is_refused(data):
    (data / "train-00001-of-00002.tfrecord").unlink()
    gone = r"00001-of-00002.tfrecord is in manifest.json but missing"
    with pytest.raises(ManifestError, match=gone):
        load_dir(data)


def test_a_shard_added_after_index_is_refused(data):
    write_records(data / "train-00002-of-00002.tfrecord", [example()])
    with pytest.raises(ManifestError, match=r"00002-of-00002.tfrecord is not in manifest.json"):
        load_dir(data)


def test_a_manifest_this_project_cannot_read_is_refused(data):
    (data / "manifest.json").write_text('{"version": 1}')
    with pytest.raises(ManifestError, match=r"manifest.json is not a manifest .* run `\S+ index"):
        load_dir(data)


def test_the_manifest_is_replaced_whole(data, monkeypatch):
    before = (data / "manifest.json").read_text()

    def fail(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(tf.io.gfile, "rename", fail)
    with pytest.raises(OSError):
        index(str(data))
    assert (data / "manifest.json").read_text() == before


def test_a_directory_that_refuses_the_manifest_gives_one_line(data, monkeypatch):
    def refuse(path, mode="r"):
        raise tf.errors.PermissionDeniedError(None, None, f"{path}; Permission denied")

    monkeypatch.setattr(tf.io.gfile, "GFile", refuse)
    refused = r"^cannot write \S+manifest.json \(.*Permission denied\) - make \S+ writable"
    with pytest.raises(ManifestError, match=refused):
        index(str(data))
    assert not (data / "manifest.json.partial").exists()


@pytest.mark.parametrize(
    "ranges, looks_sorted",
    [
        ([(0, 0), (0, 1), (1, 2), (2, 3)], True),  # 4 labels, each shard 2 at most
        ([(0, 249), (249, 499), (500, 749), (750, 999)], True),
        ([(0, 0), (1, 1), (2, 3)], False),  # too few shards to tell
        ([(0, 3), (0, 2), (1, 3), (0, 3)], False),  # shuffled: each spans most labels
        ([(0, 0), (0, 1), (1, 1), (1, 2), (2, 2), (2, 2)], True),  # 3 labels
        ([(0, 0), (1, 1), (2, 2), (0, 3)], True),  # most shards hold one label
        ([(0, 0), (1, 1), (0, 3), (0, 2)], False),  # half of them: not most
        ([(5, 5)] * 4, False),  # a single label
        ([(0, 2)] * 3 + [(0, 1)] * 3, False),  # shuffled, a class too rare to be in each
        ([(-1.5, 0.2), (0.2, 1.1), (1.1, 2.0), (2.0, 3.5)], True),  # a sorted target
        ([(-1.5, 3.1), (-1.2, 3.5), (-1.4, 2.9), (-1.0, 3.3)], False),  # shuffled
        ([(0.1, 9.5), (0.2, 40.0), (0.1, 7.0), (0.3, 12.0)], False),  # shuffled, long-tailed
        ([(0.0, 0.0)] * 3 + [(0.0, 2.5)], False),  # a target mostly 0.0: some shards all 0.0
        ([(0.0, 0.0)] * 6 + [(0.1 * i, 0.1 * i + 0.1) for i in range(1, 5)], True),  # sorted
    ],
)
def test_shards_in_label_order_are_told_from_their_label_ranges(ranges, looks_sorted):
    assert sorted_by_label(ranges) is looks_sorted


@pytest.mark.skipif(NUM_CLASSES is None, reason="the task's labels are not classes")
def test_index_warns_once_when_the_shards_look_sorted_by_label(tmp_path, caplog):
    def warnings():
        return [record for record in caplog.records if record.name == manifest.__name__]

    # Two shards per class: in label order, most hold a single label.
    shards = max(4, 2 * NUM_CLASSES)
    write_shards(tmp_path, [8] * shards)  # labels drawn at random: every shard spans most
    assert not warnings()
    write_shards(tmp_path, [8] * shards, by_label=True)
    [warning] = warnings()
    assert warning.levelname == "WARNING"
    message = warning.getMessage()
    assert message.startswith(
        f"the {shards} training shards look sorted by label (most hold at most half of"
        f" labels 0..{NUM_CLASSES - 1})"
    )
    assert message.endswith("re-shard with the records shuffled, then re-run index")


def test_records_in_label_order_are_told_from_their_order():
    rng = np.random.default_rng(3)
    two_classes = np.repeat([0, 1], 512)
    assert in_label_order(two_classes)
    assert not in_label_order(rng.permutation(two_classes))
    # A dominant class shuffled has long runs, but as many changes as expected.
    dominant = rng.permutation(np.repeat([0, 1, 2], [960, 32, 32]))
    assert not in_label_order(dominant)
    assert in_label_order(np.sort(dominant))
    assert not in_label_order(np.zeros(1024, np.int64))  # a single label cannot tell
    assert not in_label_order(np.array([1, 0, 2]))  # too few records to tell
    # Many classes written round-robin: mixed, though each record steps one rank.
    assert not in_label_order(np.tile(np.arange(20), 50))
    # A regression target (no runs: every value differs) sorted, and shuffled.
    target = rng.normal(size=1024)
    assert in_label_order(np.sort(target))
    assert not in_label_order(target)
    # Multi-label rows, grouped by label set.
    label_sets = rng.integers(0, 2, (1024, 5))
    assert in_label_order(label_sets[np.lexsort(label_sets.T)])
    assert not in_label_order(label_sets)


def test_index_warns_when_one_shard_holds_its_records_in_label_order(tmp_path, caplog):
    # One shard: its label range spans every label, its order does not.
    write_shards(tmp_path, [256], by_label=True)
    [warning] = [record for record in caplog.records if record.name == manifest.__name__]
    assert warning.getMessage().startswith(
        "1 of the 1 training shards hold their records in label order"
        " (train-00000-of-00001.tfrecord: their first records follow the order of their labels)"
    )


def test_the_first_corrupt_file_is_found(data):
    files = sorted(str(path) for path in data.glob("train-*.tfrecord"))
    assert first_corrupt_file(files) is None
    flip_a_byte(data / "train-00001-of-00002.tfrecord")
    assert first_corrupt_file(files, threads=1) == files[1]


def test_index_reads_the_files_counts_a_few_files_ahead_not_all_at_once():
    started = []

    def summarize_file(path):
        started.append(path)
        return path

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        taken = manifest.in_order(pool, 4, summarize_file, range(100))
        assert next(taken) == 0
        time.sleep(0.2)  # pool.map would have run all 100 files by now
        assert len(started) <= 1 + 4
        assert [0, *taken] == list(range(100))
