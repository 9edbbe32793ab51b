"""The training input: global batches split across replicas, an order that is a
function of (seed, epoch, step), and a stream that runs on across epochs."""

import numpy as np
import pytest
import tensorflow as tf

from {{ cookiecutter.package_name }}.data import pipeline
from {{ cookiecutter.package_name }}.data.pipeline import (
    ArraySource,
    DataError,
    evaluation_batches,
    make_plan,
    training_input,
    worker_batches,
)
from {{ cookiecutter.package_name }}.data.record_format import FEATURES
from {{ cookiecutter.package_name }}.task import sample_examples


class RowIndices(ArraySource):
    """Parses each record as its row index: the data order, without the examples."""

    def parse(self, rows, *keys):
        return rows, rows


class FileRows:
    """A source of `len(counts)` files, file f holding the next counts[f] row
    indices, read as TFRecord shards are (pipeline.Source): `read` counts the
    records read."""

    def __init__(self, counts):
        self.counts = tuple(counts)
        self.starts = tf.constant(np.cumsum((0, *counts))[:-1], tf.int64)
        self.read = tf.Variable(0, dtype=tf.int64)

    def records(self, files, seed=None):
        def rows_of(file):
            rows = tf.data.Dataset.range(self.counts_of(file))
            return rows.map(lambda row: row + self.starts[file])

        paths = tf.data.Dataset.from_tensor_slices(tf.cast(files, tf.int64))
        if seed is not None:
            paths = paths.shuffle(tf.size(files, out_type=tf.int64), seed, False)
        records = paths.interleave(rows_of, cycle_length=16).map(self.counted)
        return records if seed is None else records.shuffle(64, seed, False)

    def counts_of(self, file):
        return tf.gather(tf.constant(self.counts, tf.int64), file)

    def counted(self, record):
        with tf.control_dependencies([self.read.assign_add(1)]):
            return tf.identity(record)

    def parse(self, rows, *keys):
        return rows, rows


def source(count, kind=RowIndices):
    return kind(*sample_examples(count, seed=0))


def plan_for(count, global_batch_size, steps_per_epoch=None, evaluation=None, replicas=1):
    """A plan for `replicas` replicas on one worker (the global batch split among them)."""
    return make_plan(
        source(count),
        evaluation or source(8),
        global_batch_size // replicas,
        replicas,
        steps_per_epoch=steps_per_epoch,
    )


def rows(batches):
    """Each batch as the list of its examples' row indices."""
    return [indices.numpy().tolist() for indices, _ in batches]


def test_fewer_examples_than_one_global_batch_is_refused():
    with pytest.raises(DataError, match="has 20 examples, fewer than one global batch of 32"):
        plan_for(20, 32)


def test_an_empty_evaluation_set_is_refused():
    with pytest.raises(DataError, match=r"^the evaluation data is empty - give it"):
        plan_for(64, 32, evaluation=ArraySource(*sample_examples(0, seed=1)))


def test_one_pass_is_every_full_global_batch_once():
    plan = plan_for(100, 32)
    batches = rows(worker_batches(plan, seed=0, epoch=0, first_step=0))
    assert plan.steps_per_epoch == 3 and [len(batch) for batch in batches] == [32, 32, 32]
    seen = [row for batch in batches for row in batch]
    assert len(set(seen)) == 96  # no example twice; 4 of 100 left out (less than a batch)


def test_each_replica_gets_its_share_of_the_global_batch(two_replicas):
    plan = plan_for(128, 32, replicas=2)
    for features, labels in training_input(two_replicas, plan, seed=0, epoch=0):
        local = two_replicas.experimental_local_results(features)
        assert [part.shape[0] for part in local] == [16, 16]
        assert sum(part.shape[0] for part in two_replicas.experimental_local_results(labels)) == 32


def test_a_plan_made_for_other_replicas_is_refused(two_replicas):
    # Its per-replica batch would be the whole global batch on each replica.
    with pytest.raises(
        DataError,
        match=r"^the plan is for 1 worker\(s\) and 1 replica\(s\), the"
        r" strategy has 1 and 2 - plan with training.plan_run",
    ):
        training_input(two_replicas, plan_for(128, 32), seed=0, epoch=0)


def test_two_replicas_together_see_the_one_device_batches(two_replicas):
    """Replica shares of step S, together, are global batch S of the one-device order."""
    on_replicas, on_one_device = plan_for(128, 32, replicas=2), plan_for(128, 32)
    together = [
        sorted(
            row
            for part in two_replicas.experimental_local_results(features)
            for row in part.numpy().tolist()
        )
        for features, _ in training_input(two_replicas, on_replicas, seed=3, epoch=1)
    ]
    alone = rows(worker_batches(on_one_device, seed=3, epoch=1, first_step=0))
    alone = [sorted(batch) for batch in alone]
    assert together == alone


def test_the_order_is_a_function_of_seed_and_epoch():
    plan = plan_for(128, 32)

    def order(seed, epoch):
        return rows(worker_batches(plan, seed, epoch, first_step=0))

    assert order(1, 0) == order(1, 0)
    assert order(1, 0) != order(2, 0)
    assert order(1, 0) != order(1, 1)
    assert sorted(sum(order(1, 0), [])) == sorted(sum(order(1, 1), []))


def test_a_resumes_skip_reports_its_progress_and_lands_on_the_same_batches(monkeypatch):
    # The watchdog's progress: a skip through hundreds of GB is not a stall.
    monkeypatch.setattr(pipeline, "SKIP_REPORT_RECORDS", 64)
    plan = plan_for(256, 32)  # in memory: one block
    reports = []
    resumed = worker_batches(
        plan, 5, 2, 7, on_skip_progress=lambda done, total: reports.append((done, total))
    )
    assert rows(resumed) == rows(worker_batches(plan, seed=5, epoch=2, first_step=0))[7:]
    assert reports == [(0, 224), (64, 224), (128, 224), (192, 224)]


def files_plan(counts, global_batch_size, num_workers=1, replicas=1, **kwargs):
    return make_plan(
        FileRows(counts), source(8), global_batch_size // replicas, replicas, num_workers, **kwargs
    )


def functions_with(dataset, op):
    """{name: {node: (op, [input nodes])}} of the functions in a dataset's
    serialized graph that hold an `op` node (each pass's records are built in one)."""
    graph = tf.compat.v1.GraphDef.FromString(dataset._as_serialized_graph().numpy())
    functions = {
        function.signature.name: {
            node.name: (node.op, [name.split(":")[0].lstrip("^") for name in node.input])
            for node in function.node_def
        }
        for function in graph.library.function
    }
    return {
        name: nodes
        for name, nodes in functions.items()
        if any(found == op for found, _ in nodes.values())
    }


def test_a_resumes_progress_filter_holds_the_block_it_lands_in_only():
    plan = files_plan([20] * 32, 32)  # 2 files a block, 20 steps a pass: step 12 is in block 9
    resumed = worker_batches(plan, 5, 2, 12, epochs=3, on_skip_progress=lambda done, total: None)
    ((name, nodes),) = functions_with(resumed, "FilterDataset").items()

    def upstream(node):
        op, inputs = nodes[node]
        return {op}.union(*(upstream(found) for found in inputs if found in nodes))

    ((landing, rest),) = [inputs for op, inputs in nodes.values() if op == "ConcatenateDataset"]
    assert "FilterDataset" in upstream(landing)
    assert "FilterDataset" not in upstream(rest)
    whole = rows(worker_batches(plan, seed=5, epoch=2, first_step=0, epochs=3))
    assert rows(resumed) == whole[12:]


def test_a_resume_at_any_step_lands_on_the_uninterrupted_batches():
    # DATA sharding's second worker, on files of uneven sizes: its every-W-th
    # record from a position that is not the pass's start. FILE sharding, and one
    # worker, read as this with W = 1.
    plan = files_plan([100, 10, 10], 8, num_workers=2, replicas=4, steps_per_epoch=4)
    assert plan.shards.policy == pipeline.DATA
    assert plan.shards.steps_per_pass == 15  # steps land in all 3 blocks, mid-block
    worker = 1
    whole = rows(worker_batches(plan, 3, 0, 0, worker, epochs=5))
    for step in range(plan.shards.steps_per_pass + 2):  # into the second pass
        epoch, first_step = divmod(step, 4)
        resumed = rows(worker_batches(plan, 3, epoch, first_step, worker, epochs=5 - epoch))
        assert resumed == whole[2 * step :], step


def test_a_pass_reads_its_files_in_shuffled_blocks_of_records_shuffled_together():
    plan = files_plan([10] * 64, 20)  # 4 files a block
    assert pipeline.block_width(64) == 4
    passes = [sum(rows(worker_batches(plan, 1, epoch, 0)), []) for epoch in range(2)]
    for records in passes:
        assert sorted(records) == list(range(640))
        blocks = [records[start : start + 40] for start in range(0, 640, 40)]
        assert all(len({row // 10 for row in block}) == 4 for block in blocks)
        assert any(block != sorted(block) for block in blocks)
    assert passes[0][:40] != passes[1][:40]


@pytest.mark.parametrize("into_pass", [0.1, 0.9])
def test_a_resume_reads_at_most_one_block_before_its_first_batch(into_pass):
    plan = files_plan([10] * 64, 20)  # 16 blocks of 40 records
    first_step = int(into_pass * plan.shards.steps_per_pass)
    next(iter(worker_batches(plan, 1, 0, first_step)))
    # Everything before the step is 0.1 or 0.9 of the pass: 60 or 560 records.
    # Read: its block, the next, and what the prefetch reads ahead.
    assert plan.train.read.numpy() < 40 + 40 + 64


def test_steps_per_epoch_continues_the_stream_across_epochs():
    # 8 batches per pass, 3 steps per epoch: epochs 0-2 are steps 0-8 of the stream.
    streamed = plan_for(256, 32, steps_per_epoch=3)
    one_pass = plan_for(256, 32)
    passes = rows(worker_batches(one_pass, seed=7, epoch=0, first_step=0))
    passes += rows(worker_batches(one_pass, seed=7, epoch=1, first_step=0))
    epochs = [rows(worker_batches(streamed, seed=7, epoch=e, first_step=0)) for e in range(3)]
    assert sum(epochs, []) == passes[:9]
    # A resume inside epoch 2 (which crosses into the second pass) lands on the same batches.
    assert rows(worker_batches(streamed, seed=7, epoch=2, first_step=2)) == passes[8:9]


def test_each_worker_parses_only_its_share_of_the_evaluation_set():
    # In-memory data shards by DATA: every worker reads every record, and each
    # parses its slice of every global batch only. 2 workers x 2 replicas x 8:
    # 70 examples are 2 global batches of 32 and a short one of 6.
    plan = make_plan(source(64), source(70), 8, replicas=4, num_workers=2)
    shares = [rows(evaluation_batches(plan, worker)) for worker in (0, 1)]
    assert [len(batches) for batches in shares] == [6, 6]  # 3 global batches x 2 replicas
    assert shares[0][4:] == [[64, 65, 66, 67, 68, 69], []]  # worker 0 holds the short rest
    assert shares[1][4:] == [[], []]
    parsed = [sorted(row for batch in batches for row in batch) for batches in shares]
    assert [len(rows_parsed) for rows_parsed in parsed] == [38, 32]
    assert sorted(parsed[0] + parsed[1]) == list(range(70))  # each example once


def test_evaluation_batches_keep_their_order_and_the_short_last_batch():
    plan = plan_for(64, 32, evaluation=source(70))
    assert rows(evaluation_batches(plan)) == [
        list(range(32)),
        list(range(32, 64)),
        list(range(64, 70)),
    ]
{%- if cookiecutter.task == "image" %}


def test_augmentation_is_the_same_on_any_number_of_replicas_and_after_a_resume(two_replicas):
    """Each example's crop and flip come from (seed, pass, position): not from the
    replica that reads it, nor from where the run started."""
    plan = make_plan(source(256, ArraySource), source(8, ArraySource), 64)
    on_replicas = make_plan(source(256, ArraySource), source(8, ArraySource), 32, replicas=2)

    def step_images(batches):
        return [sorted(image.tobytes() for image in features.numpy()) for features, _ in batches]

    alone = step_images(worker_batches(plan, seed=3, epoch=1, first_step=0))
    assert step_images(worker_batches(plan, seed=3, epoch=1, first_step=2)) == alone[2:]
    together = [
        sorted(
            image.tobytes()
            for part in two_replicas.experimental_local_results(features)
            for image in part.numpy()
        )
        for features, _ in training_input(two_replicas, on_replicas, seed=3, epoch=1)
    ]
    assert together == alone
    # Another pass, other crops of the same images.
    assert step_images(worker_batches(plan, seed=3, epoch=2, first_step=0)) != alone


def test_evaluation_images_are_central_crops_without_randomness():
    plan = make_plan(source(64, ArraySource), source(40, ArraySource), 32)
    first = [features.numpy() for features, _ in evaluation_batches(plan)]
    again = [features.numpy() for features, _ in evaluation_batches(plan)]
    assert [len(batch) for batch in first] == [32, 8]
    for left, right in zip(first, again, strict=True):
        np.testing.assert_array_equal(left, right)
{%- endif %}


def test_the_sample_task_is_fixed():
    first, again = sample_examples(2000, seed=0), sample_examples(2000, seed=0)
    for left, right in zip(tf.nest.flatten(first), tf.nest.flatten(again), strict=True):
        np.testing.assert_array_equal(left, right)


@pytest.mark.skipif(not FEATURES or not FEATURES.num_classes, reason="the labels are not classes")
def test_the_sample_task_draws_every_class_it_has():
    _, labels = sample_examples(2000, seed=0)
    # Every class, each well represented (and none beyond them).
    counts = np.bincount(labels, minlength=FEATURES.num_classes)
    assert len(counts) == FEATURES.num_classes and counts.min() > 0.05 * len(labels), counts
