"""plan_shards, for any cluster and data shape: every worker has the records for
the planned steps, no example is read twice in a pass, and little is left out:
less than a global batch, plus (FILE) fewer steps than workers or 1% of the
pass. plan_evaluation: every example once, each file read by one worker
whenever every worker can have one, the same steps on all (property-based:
hypothesis draws the shapes)."""

import dataclasses

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from {{ cookiecutter.package_name }}.data.pipeline import (
    DATA,
    FILE,
    DataError,
    ShardPlan,
    make_plan,
    max_file_sharding_loss,
    plan_evaluation,
    plan_shards,
)

# ImageNet's 50,000 validation images cut into 128 files of 390 or 391 records.
IMAGENET_VALIDATION = np.diff(np.linspace(0, 50_000, 129).astype(int)).tolist()


def records_per_worker(plan, counts, num_workers):
    """What each worker's pipeline keeps: its files (FILE), or every W-th record
    of all files starting at its index (DATA)."""
    total = sum(counts)
    if plan.policy == FILE:
        return [sum(counts[index] for index in files) for files in plan.worker_files]
    return [len(range(worker, total, num_workers)) for worker in range(num_workers)]


@settings(max_examples=400, deadline=None)
@given(
    num_workers=st.integers(1, 8),
    counts=st.lists(st.integers(1, 3000), min_size=1, max_size=64),
    per_replica=st.integers(1, 256),
    replicas_per_worker=st.integers(1, 8),
)
def test_no_worker_runs_out_and_less_than_a_batch_is_left_out(
    num_workers, counts, per_replica, replicas_per_worker
):
    global_batch = per_replica * replicas_per_worker * num_workers
    total = sum(counts)
    if total < global_batch:
        with pytest.raises(DataError, match="fewer than one global batch"):
            plan_shards(counts, num_workers, global_batch)
        return
    plan = plan_shards(counts, num_workers, global_batch)
    steps = plan.steps_per_pass
    full_steps = total // global_batch
    # FILE leaves out fewer steps than workers, or 1% of the pass; DATA none.
    assert full_steps - max_file_sharding_loss(full_steps, num_workers) <= steps <= full_steps
    if plan.policy == DATA:
        assert steps == full_steps
    # Every worker feeds its replicas a full batch at every one of the steps.
    worker_batch = global_batch // num_workers
    kept = records_per_worker(plan, counts, num_workers)
    assert all(records >= steps * worker_batch for records in kept)
    assert len(plan.worker_files) == num_workers
    if plan.policy == FILE:
        # Whole files, each read by exactly one worker.
        assigned = sorted(index for files in plan.worker_files for index in files)
        assert assigned == list(range(len(counts)))
    else:
        assert plan.policy == DATA
        assert all(files == tuple(range(len(counts))) for files in plan.worker_files)


def test_one_worker_reads_every_file():
    plan = plan_shards([10, 20, 30], 1, 8)
    assert plan.worker_files == ((0, 1, 2),) and plan.steps_per_pass == 7


def test_even_files_shard_by_file():
    # 2 workers x 2 files of 1024, global batch 192: each worker reads 2048 of its own.
    plan = plan_shards([1024] * 4, 2, 192)
    assert plan.policy == FILE and plan.steps_per_pass == 21
    assert [len(files) for files in plan.worker_files] == [2, 2]


def test_files_that_cannot_balance_shard_by_data():
    plan = plan_shards([700, 200, 100], 2, 128)
    assert plan.policy == DATA and plan.steps_per_pass == 7


def test_fewer_files_than_workers_shard_by_data():
    assert plan_shards([4096], 2, 128).policy == DATA


@pytest.mark.parametrize("num_workers", range(2, 17))
def test_imagenet_shards_on_8_gpu_workers_shard_by_file(num_workers):
    # ImageNet's 1,281,167 training images in 1024 shards, 8 replicas x 64 per worker:
    # at 3, 5 and 6 workers whole files give one step less per pass than the data
    # holds, and every worker reading all ~140 GB each pass would cost far more.
    counts = [1_281_167 // 1024 + (index < 1_281_167 % 1024) for index in range(1024)]
    global_batch = num_workers * 8 * 64
    plan = plan_shards(counts, num_workers, global_batch)
    assert plan.policy == FILE
    assert sum(counts) // global_batch - plan.steps_per_pass < num_workers


def test_file_sharding_that_loses_more_than_one_percent_shards_by_data():
    # 2 workers, files of 600 and 400: whole files give 6 of 8 steps (batch 100).
    assert plan_shards([600, 400], 2, 100).policy == DATA


def evaluated(plan, counts, global_batch, worker):
    """The examples (numbered through the files in order) worker `worker`
    evaluates at each step, as evaluation_batches cuts them: its files' records
    in batches of its part of a global batch (FILE), or its slice of each global
    batch of all of them (DATA); an empty step once its records run out."""
    first_example = np.cumsum([0, *counts])
    files = plan.worker_files[worker]
    read = np.concatenate([np.arange(first_example[i], first_example[i + 1]) for i in files])
    worker_batch = global_batch // plan.num_workers
    if plan.policy == FILE:
        stride, first = worker_batch, 0
    else:
        stride, first = global_batch, worker * worker_batch
    starts = [step * stride + first for step in range(plan.steps_per_pass)]
    return [read[start : start + worker_batch] for start in starts]


@st.composite
def file_counts(draw):
    """Records per file: up to 160 files of up to 400, some of them empty, not all
    (make_plan refuses an empty evaluation set)."""
    counts = draw(st.lists(st.integers(0, 400), min_size=1, max_size=160))
    counts[draw(st.integers(0, len(counts) - 1))] = draw(st.integers(1, 400))
    return counts


@settings(max_examples=300, deadline=None)
@given(
    num_workers=st.integers(1, 64),
    counts=file_counts(),
    per_replica=st.integers(1, 64),
    replicas_per_worker=st.integers(1, 8),
)
@example(num_workers=64, counts=IMAGENET_VALIDATION, per_replica=64, replicas_per_worker=8)
@example(num_workers=4, counts=[0, 0, 5, 0], per_replica=2, replicas_per_worker=1)
def test_evaluation_counts_every_example_once_and_reads_each_file_on_one_worker(
    num_workers, counts, per_replica, replicas_per_worker
):
    global_batch = per_replica * replicas_per_worker * num_workers
    plan = plan_evaluation(counts, num_workers, global_batch)
    holding = [index for index, count in enumerate(counts) if count]
    steps = [evaluated(plan, counts, global_batch, worker) for worker in range(num_workers)]
    # Every worker runs the planned steps, and the last of them holds examples.
    assert [len(worker_steps) for worker_steps in steps] == [plan.steps_per_pass] * num_workers
    assert any(len(worker_steps[-1]) for worker_steps in steps)
    # Each example counted exactly once: no worker short of a step for its records.
    seen = np.concatenate([batch for worker_steps in steps for batch in worker_steps])
    np.testing.assert_array_equal(np.sort(seen), np.arange(sum(counts)))
    # No worker reads a file twice, nor one without records.
    for files in plan.worker_files:
        assert len(set(files)) == len(files) and set(files) <= set(holding)
    if len(holding) >= num_workers:
        # Each file on one worker, none reading past its share by a file or more.
        assert plan.policy == FILE
        assert sorted(index for files in plan.worker_files for index in files) == holding
        for files in plan.worker_files:
            assert sum(counts[index] for index in files) < sum(counts) / num_workers + max(counts)
    else:
        assert plan.policy == DATA and plan.worker_files == (tuple(holding),) * num_workers


def test_evaluation_shards_by_file_whenever_every_worker_can_have_one():
    # Uneven files too: worker 1 follows its 2 batches of 8 (12 records) with 2 empty ones.
    assert plan_evaluation([30, 12], 2, 16) == ShardPlan(FILE, ((0,), (1,)), 4)
    assert plan_evaluation([30, 30, 30], 2, 16) == ShardPlan(FILE, ((0, 2), (1,)), 8)
    # Fewer files with records than workers: all read them, each keeping its slice.
    assert plan_evaluation([60], 2, 16) == ShardPlan(DATA, ((0,), (0,)), 4)
    assert plan_evaluation([0, 60, 0], 2, 16) == ShardPlan(DATA, ((1,), (1,)), 4)


@dataclasses.dataclass
class Counts:
    """A source as planning sees it: records per file."""

    counts: tuple[int, ...]


@pytest.mark.parametrize("num_workers, most_read", [(2, 25_000), (4, 12_500), (64, 782)])
def test_imagenet_validation_is_read_once_across_workers(num_workers, most_read):
    # 8 replicas x 64 per worker. Before, the files' uneven shares had every
    # worker of 2 or more read all 50,000 images (6.4 GB) at every evaluation.
    source = Counts(tuple(IMAGENET_VALIDATION))
    plan = make_plan(source, source, 64, replicas=8 * num_workers, num_workers=num_workers)
    shards = plan.evaluation_shards
    read = [sum(IMAGENET_VALIDATION[index] for index in files) for files in shards.worker_files]
    assert shards.policy == FILE and sum(read) == 50_000 and max(read) == most_read
    assert shards.steps_per_pass == -(-most_read // 512)
