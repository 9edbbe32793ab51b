"""plan_shards, for any cluster and data shape: every worker has the records for
the planned steps, no example is read twice in a pass, and little is left out:
less than a global batch, plus (FILE) fewer steps than workers or 1% of the
pass (property-based: hypothesis draws the shapes)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from {{ cookiecutter.package_name }}.data import (
    DATA,
    FILE,
    DataError,
    max_file_sharding_loss,
    plan_shards,
)


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
