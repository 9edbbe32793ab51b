"""TFRecord input: written by make-data, read by each worker from its own files
(FILE) or all of them (DATA), and never short of a step."""

import collections
import dataclasses

{% if cookiecutter.task == "image" -%}
import numpy as np
{% endif -%}
import pytest
import tensorflow as tf
from conftest import each_example, encoded, {% if cookiecutter.task == "image" %}sample_statistics, {% endif %}write_shards

from {{ cookiecutter.package_name }}.config import TrainConfig
from {{ cookiecutter.package_name }}.data import sources as project_sources
from {{ cookiecutter.package_name }}.data.pipeline import (
    DataError,
    evaluation_batches,
    make_plan,
    worker_batches,
)
{%- if cookiecutter.task == "image" %}
from {{ cookiecutter.package_name }}.data.record_format import FEATURES, parse_batch
{%- else %}
from {{ cookiecutter.package_name }}.data.record_format import LABEL_SHAPE, SERVING_INPUT, parse_batch
{%- endif %}
from {{ cookiecutter.package_name }}.data.sources import RecordSource, load_sources, make_data
from {{ cookiecutter.package_name }}.data.tfrecords import shard_name, write_split
{%- if cookiecutter.task == "image" %}
from {{ cookiecutter.package_name }}.task import build_model, prepare_batch, sample_examples
{%- else %}
from {{ cookiecutter.package_name }}.task import sample_examples
{%- endif %}


class SerializedRecords(RecordSource):
    """Parses each record as its serialized bytes (which identify it)."""

    def parse(self, records, *keys):
        return records, records


def sources(path):
    return load_sources(TrainConfig(data_dir=str(path)))


def record_sources(path):
    return [SerializedRecords(**dataclasses.asdict(source)) for source in sources(path)]


def examples_of(batches):
    """Each example of `batches` (of SerializedRecords), as its serialized bytes."""
    return [record for records, _ in batches for record in records.numpy()]
{%- if cookiecutter.task == "image" %}


def test_make_data_round_trips_through_the_training_pipeline(tmp_path):
    make_data(tmp_path, num_files=3, examples=90, seed=5)
    train, evaluation = sources(tmp_path)
    assert (sum(train.counts), sum(evaluation.counts)) == (90, 22)
    plan = make_plan(*record_sources(tmp_path), per_replica_batch_size=30)
    # The JPEG bytes and labels as the records hold them.
    encoded, labels = FEATURES.parse(tf.constant(examples_of(worker_batches(plan, 0, 0, 0))))
    expected_images, expected_labels = sample_examples(90, seed=5)
    originals = expected_images.reshape(90, -1).astype("float32")
    nearest = []
    for image in encoded:
        decoded = tf.io.decode_jpeg(image, channels=3).numpy().reshape(1, -1).astype("float32")
        nearest.append(int(np.abs(originals - decoded).mean(axis=1).argmin()))
    # JPEG is lossy (on the images' noise most of all), yet each decoded image is
    # closest to its own original: every original once.
    assert sorted(nearest) == list(range(90))
    np.testing.assert_array_equal(labels.numpy(), expected_labels[nearest])


def test_parse_batch_parses_a_batch_of_records(tmp_path):
    images, _ = sample_examples(6, seed=0)
    write_split(tmp_path, "train", *sample_examples(6, seed=0), num_files=1)
    path = tmp_path / shard_name("train", 0, 1)
    records = next(iter(tf.data.TFRecordDataset(str(path)).batch(6)))
    central, labels = parse_batch(records)
    keys = tf.stack([tf.zeros(6, tf.int64), tf.range(6, dtype=tf.int64)], axis=1)
    cropped, same_labels = parse_batch(records, keys)
    # The model's inputs, as the sample's decoded images give them.
    model_input = tuple(build_model(sample_statistics()).input_shape[1:])
    assert central.shape == cropped.shape == prepare_batch(images).shape == (6, *model_input)
    assert central.dtype == cropped.dtype == tf.uint8 and labels.dtype == tf.int32
    np.testing.assert_array_equal(labels, same_labels)
    # Evaluation's central crops are fixed; training's crops come from the keys.
    np.testing.assert_array_equal(parse_batch(records)[0], central)
    assert not np.array_equal(cropped, central)
    np.testing.assert_array_equal(parse_batch(records, keys)[0], cropped)


def test_a_label_offset_maps_1_based_labels_to_classes(tmp_path):
    make_data(tmp_path, num_files=1, examples=40)
    train, evaluation = sources(tmp_path)
    shifted = dataclasses.replace(evaluation, label_offset=1)
    plan = make_plan(train, evaluation, 8)
    labels = np.concatenate([y.numpy() for _, y in evaluation_batches(plan)])
    plan = make_plan(train, shifted, 8)
    shifted_labels = np.concatenate([y.numpy() for _, y in evaluation_batches(plan)])
    np.testing.assert_array_equal(shifted_labels, labels - 1)
{%- else %}


def test_make_data_round_trips_through_the_evaluation_pipeline(tmp_path):
    make_data(tmp_path, num_files=3, examples=90, seed=5)
    train, evaluation = sources(tmp_path)
    assert (sum(train.counts), sum(evaluation.counts)) == (90, 22)
    plan = make_plan(train, evaluation, per_replica_batch_size=8)
    read = [example for batch in evaluation_batches(plan) for example in each_example(*batch)]
    # The evaluation split in its order, each example as make-data wrote it.
    assert encoded(read) == encoded(each_example(*sample_examples(22, seed=6)))


def test_parse_batch_parses_a_batch_of_records_into_the_models_inputs(tmp_path):
    write_split(tmp_path, "train", *sample_examples(6, seed=0), num_files=1)
    path = tmp_path / shard_name("train", 0, 1)
    records = next(iter(tf.data.TFRecordDataset(str(path)).batch(6)))
    inputs, labels = parse_batch(records)
    # What a client sends the exported model is a batch of the model's inputs.
    tf.nest.assert_same_structure(inputs, SERVING_INPUT)
    for spec, tensor in zip(tf.nest.flatten(SERVING_INPUT), tf.nest.flatten(inputs), strict=True):
        assert spec.dtype == tensor.dtype and spec.shape.is_compatible_with(tensor.shape)
    assert labels.shape == (6, *LABEL_SHAPE)
    assert encoded(each_example(inputs, labels)) == encoded(each_example(*sample_examples(6, 0)))
{%- endif %}


def test_files_are_shuffled_per_epoch(tmp_path, monkeypatch):
    """Pass p starts with a file chosen by seed + p, not always the first file."""
    # Records in file order: the files alone decide.
    monkeypatch.setattr(project_sources, "SHUFFLE_RECORDS", 1)
    make_data(tmp_path, num_files=8, examples=8 * 64)
    plan = make_plan(*record_sources(tmp_path), per_replica_batch_size=64)
    firsts = {examples_of(worker_batches(plan, 0, epoch, 0))[0] for epoch in range(6)}
    assert len(firsts) > 1


@pytest.mark.parametrize(
    "counts, workers, per_replica, replicas, policy",
    [
        ([1024] * 4, 2, 96, 1, "FILE"),  # the shape that ran out before (facts, section 11)
        ([700, 200, 100], 2, 64, 1, "DATA"),  # whole files cannot balance
        ([300, 290, 310, 300], 2, 32, 2, "FILE"),  # uneven files, even shares
        ([50, 3], 2, 8, 1, "DATA"),
        ([40] * 3, 3, 10, 1, "FILE"),
    ],
    ids=["4-even-files-batch-96", "uneven", "uneven-files-2-replicas", "tiny-tail", "3-workers"],
)
def test_every_worker_has_its_steps_and_no_example_twice(
    tmp_path, counts, workers, per_replica, replicas, policy
):
    write_shards(tmp_path, counts)
    plan = make_plan(
        *record_sources(tmp_path), per_replica, replicas=replicas * workers, num_workers=workers
    )
    global_batch = plan.global_batch_size
    assert global_batch == per_replica * replicas * workers
    assert plan.shards.policy.name == policy
    seen = []
    for worker in range(workers):
        batches = list(worker_batches(plan, 7, 0, 0, worker))
        # Exactly the planned steps, each with one full batch per local replica.
        assert [len(f) for f, _ in batches] == [per_replica] * (plan.steps_per_epoch * replicas)
        seen += examples_of(batches)
    assert len(seen) == plan.steps_per_epoch * global_batch
    assert sum(counts) - len(seen) < global_batch
    # No record read more often than it was written (a task's data may repeat one).
    written = collections.Counter(encoded(each_example(*sample_examples(sum(counts), seed=0))))
    assert not collections.Counter(seen) - written


@pytest.mark.parametrize(
    "counts, workers, per_replica, replicas",
    [([30, 12], 2, 8, 1), ([12, 7, 20, 3], 3, 4, 2)],
    ids=["2-workers", "3-workers-2-replicas"],
)
def test_each_worker_evaluates_its_own_files_and_every_example_once(
    tmp_path, monkeypatch, counts, workers, per_replica, replicas
):
    """Uneven files: each worker reads only its own, and pads with empty batches
    to the steps of the most loaded one."""
    write_shards(tmp_path, counts)
    read = []
    records = RecordSource.records
    monkeypatch.setattr(
        RecordSource, "records", lambda self, files: read.append(files) or records(self, files)
    )
    train, _ = sources(tmp_path)  # the training files, as an evaluation set
    plan = make_plan(train, train, per_replica, replicas=replicas * workers, num_workers=workers)
    streams = [list(evaluation_batches(plan, worker)) for worker in range(workers)]
    # Each file read by one worker, once.
    assert len(read) == workers
    assert sorted(index for files in read for index in files) == list(range(len(counts)))
    # The same steps on every worker, one batch per replica each.
    steps = plan.evaluation_shards.steps_per_pass
    assert [len(stream) for stream in streams] == [steps * replicas] * workers
    batches = [batch for stream in streams for batch in stream]
    evaluated = [label for _, labels in batches for label in labels.numpy().tolist()]
    expected = sample_examples(sum(counts), seed=0)[1].tolist()
    assert sorted(evaluated) == sorted(expected)
    # The padding parses like any batch: no examples, the same shapes and types.
    padding = [batch for batch in batches if len(batch[1]) == 0]
    assert padding
    full = tf.nest.flatten(batches[0])
    for batch in padding:
        for padded, reference in zip(tf.nest.flatten(batch), full, strict=True):
            assert (padded.shape[1:], padded.dtype) == (reference.shape[1:], reference.dtype)


def test_evaluation_reads_every_example_once(tmp_path):
    make_data(tmp_path, num_files=2, examples=120)  # 30 eval examples
    plan = make_plan(*sources(tmp_path), per_replica_batch_size=8)
    assert [len(labels) for _, labels in evaluation_batches(plan)] == [8, 8, 8, 6]


@pytest.mark.parametrize("num_files, examples", [(0, 10), (5, 3)])
def test_make_data_refuses_impossible_sizes(tmp_path, num_files, examples):
    with pytest.raises(DataError, match="need at least one file and one example per file"):
        make_data(tmp_path, num_files=num_files, examples=examples)
