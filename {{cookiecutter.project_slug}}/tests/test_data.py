"""The training input: global batches split across replicas, an order that is a
function of (seed, epoch, step), and a stream that runs on across epochs."""

import numpy as np
import pytest
import tensorflow as tf

from {{ cookiecutter.package_name }} import data
from {{ cookiecutter.package_name }}.data import (
    ArraySource,
    DataError,
    evaluation_batches,
    make_plan,
    training_input,
    worker_batches,
)
from {{ cookiecutter.package_name }}.task import NUM_CLASSES, sample_examples


class RowIndices(ArraySource):
    """Parses each record as its row index: the data order, without the examples."""

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


def test_a_resumed_epoch_starts_at_the_batch_the_uninterrupted_one_reached():
    plan = plan_for(256, 32)
    whole = rows(worker_batches(plan, seed=5, epoch=2, first_step=0))
    assert rows(worker_batches(plan, seed=5, epoch=2, first_step=3)) == whole[3:]


def test_a_resumes_skip_reports_its_progress_and_lands_on_the_same_batches(monkeypatch):
    # The watchdog's progress: a skip through hundreds of GB is not a stall.
    monkeypatch.setattr(data, "SKIP_REPORT_BATCHES", 2)
    plan = plan_for(256, 32)
    reports = []
    resumed = worker_batches(plan, 5, 2, 7, on_skip_progress=lambda: reports.append(1))
    assert rows(resumed) == rows(worker_batches(plan, seed=5, epoch=2, first_step=0))[7:]
    assert len(reports) == 4  # at skipped batches 0, 2, 4 and 6 of 7


def dataset_nodes(dataset):
    """{node name: (op, [input node names])} of a dataset's serialized graph."""
    graph = tf.compat.v1.GraphDef.FromString(dataset._as_serialized_graph().numpy())
    return {
        node.name: (node.op, [name.split(":")[0].lstrip("^") for name in node.input])
        for node in graph.node
    }


def test_a_resumes_progress_filter_holds_the_pass_it_lands_in_only():
    plan = plan_for(256, 32)  # 8 batches a pass: the resume lands in pass 2, 2 follow
    resumed = worker_batches(plan, 5, 2, 3, epochs=3, on_skip_progress=lambda: None)
    nodes = dataset_nodes(resumed)

    def upstream(name):
        op, inputs = nodes[name]
        return {op}.union(*(upstream(found) for found in inputs))

    (inputs,) = [inputs for op, inputs in nodes.values() if op == "ConcatenateDataset"]
    first, rest = inputs
    assert "FilterDataset" in upstream(first)
    assert "FilterDataset" not in upstream(rest)
    whole = rows(worker_batches(plan, seed=5, epoch=2, first_step=0, epochs=3))
    assert rows(resumed) == whole[3:]


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


def test_synthetic_task_is_fixed_and_uses_every_class():
    features, labels = sample_examples(2000, seed=0)
    again_features, again_labels = sample_examples(2000, seed=0)
    np.testing.assert_array_equal(features, again_features)
    np.testing.assert_array_equal(labels, again_labels)
    counts = np.bincount(labels, minlength=NUM_CLASSES)
    assert counts.min() > 0.05 * len(labels), counts
