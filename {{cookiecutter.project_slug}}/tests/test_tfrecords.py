import numpy as np
import pytest
import tensorflow as tf

from {{ cookiecutter.package_name }}.config import TrainConfig
from {{ cookiecutter.package_name }}.data import (
    DataError,
    load_examples,
    make_data,
    shard_policy,
    synthetic_arrays,
)
from {{ cookiecutter.package_name }}.tfrecords import RecordError, encode


def read_all(dataset):
    features, labels = zip(*[(f.numpy(), int(y)) for f, y in dataset], strict=True)
    return np.stack(features), np.array(labels)


def test_make_data_round_trips_through_load_examples(tmp_path):
    paths = make_data(tmp_path, num_files=3, examples=90, seed=5)
    assert sorted(path.name for path in paths) == [
        "eval-00000-of-00001.tfrecord",
        "train-00000-of-00003.tfrecord",
        "train-00001-of-00003.tfrecord",
        "train-00002-of-00003.tfrecord",
    ]
    train, evaluation = load_examples(TrainConfig(data_dir=str(tmp_path)))
    assert int(train.cardinality()) == 90
    assert int(evaluation.cardinality()) == 22
    features, labels = read_all(train)
    expected_features, expected_labels = synthetic_arrays(90, seed=5)
    # Shards interleave, so compare as sets of rows.
    order = np.lexsort(features.T)
    expected_order = np.lexsort(expected_features.T)
    np.testing.assert_array_equal(features[order], expected_features[expected_order])
    np.testing.assert_array_equal(labels[order], expected_labels[expected_order])


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_training_shards_by_data_and_evaluation_by_file_only_on_an_even_split(tmp_path, workers):
    make_data(tmp_path, num_files=3, examples=90)  # 3 train files of 30, 1 eval file
    train, evaluation = load_examples(TrainConfig(data_dir=str(tmp_path)), num_workers=workers)
    # Training: the same global batches on every worker, so step S means the same
    # batch everywhere and a resume can skip to it.
    assert policy_of(train) == "DATA"
    assert policy_of(evaluation) == ("FILE" if workers == 1 else "DATA")


@pytest.mark.parametrize(
    "counts, workers, policy",
    [([30, 30], 2, "FILE"), ([30, 29], 2, "DATA"), ([10, 20, 20, 10], 2, "FILE")],
    ids=["equal-shares", "one-short", "equal-sums"],
)
def test_file_sharding_needs_equal_shares(counts, workers, policy):
    assert shard_policy(counts, workers).name == policy


def policy_of(dataset):
    return dataset.options().experimental_distribute.auto_shard_policy.name


def test_missing_data_directory_is_refused(tmp_path):
    with pytest.raises(RecordError, match="does not exist - create it with `make-data"):
        load_examples(TrainConfig(data_dir=str(tmp_path / "nope")))


def test_directory_without_shards_is_refused(tmp_path):
    with pytest.raises(RecordError, match=r"no train-\*.tfrecord files"):
        load_examples(TrainConfig(data_dir=str(tmp_path)))


def test_empty_file_is_refused(tmp_path):
    make_data(tmp_path, num_files=2, examples=40)
    (tmp_path / "train-00001-of-00002.tfrecord").write_bytes(b"")
    with pytest.raises(RecordError, match=r"train-00001-of-00002.tfrecord is empty"):
        load_examples(TrainConfig(data_dir=str(tmp_path)))


def test_corrupt_file_is_refused_before_training(tmp_path):
    make_data(tmp_path, num_files=2, examples=40)
    path = tmp_path / "train-00000-of-00002.tfrecord"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(RecordError, match=r"train-00000-of-00002.tfrecord is corrupt"):
        load_examples(TrainConfig(data_dir=str(tmp_path)))


def test_records_of_another_shape_are_refused(tmp_path):
    make_data(tmp_path, num_files=1, examples=8)
    with tf.io.TFRecordWriter(str(tmp_path / "train-00000-of-00001.tfrecord")) as writer:
        writer.write(encode(np.zeros(3, dtype="float32"), 1))
    with pytest.raises(RecordError, match="does not hold examples with a 20-value 'features'"):
        load_examples(TrainConfig(data_dir=str(tmp_path)))


@pytest.mark.parametrize("num_files, examples", [(0, 10), (5, 3)])
def test_make_data_refuses_impossible_sizes(tmp_path, num_files, examples):
    with pytest.raises(DataError, match="need at least one file and one example per file"):
        make_data(tmp_path, num_files=num_files, examples=examples)
