"""Training and evaluation input: planned from record counts, read by each worker.

Where the data is and how a record is read is the project's source (data/sources.py);
this module plans and reads any source that gives record counts, `records` and
`parse` (the Source protocol; ArraySource below: arrays in memory).

Each example gets a key of its own drawn from (seed, pass, position) for the
task's augmentation, so augmentation is part of that pure function.

The training order is a pure function of (seed, epoch, step). The data is read
in passes: pass p shuffles the files with (seed, p) and deals them into blocks
of a few files, read one after another, each block's records shuffled together.
Epoch e is global steps e*K .. e*K+K-1 of the passes laid end to end (K: steps
per epoch), so a --steps-per-epoch shorter than a pass continues the stream in
the next epoch. A run resumed at step S of epoch E finds, from the record
counts, the block that holds that step, opens it and skips inside it only: it
sees what an uninterrupted run sees, reading at most one block before its first
step wherever it lands in a pass, without checkpointing a data iterator (which
TensorFlow cannot do for a distributed dataset, tensorflow/tensorflow#56372).

Each worker builds its own pipeline (strategy.distribute_datasets_from_function)
and feeds each of its replicas one per-replica batch per step. plan_shards
decides whether a worker reads only its own files (FILE) or all of them,
keeping every W-th record (DATA); plan_evaluation decides the same for the
evaluation set, which has every worker read only its own files whenever each
can have one.
"""

import dataclasses
import functools
import heapq
import logging
import typing

import numpy as np
import tensorflow as tf

from {{ cookiecutter.package_name }} import TrainerError, task
from {{ cookiecutter.package_name }}.data import statistics

log = logging.getLogger(__name__)

DATA = tf.data.experimental.AutoShardPolicy.DATA
FILE = tf.data.experimental.AutoShardPolicy.FILE
# Rows summarized at a time for the training data's statistics.
STATISTICS_BATCH = 4096
# A pass is read in blocks of files: a resume reads the records of one block, at
# most, before its position. At least this many blocks a pass where the files
# allow (a resume then reads a sixteenth of a pass at most) ...
BLOCKS_PER_PASS = 16
# ... and at most this many files a block: the files whose records are read at
# once and shuffled together.
BLOCK_FILES = 16
# A resume's skip to its position reports progress every this many records.
SKIP_REPORT_RECORDS = 4096


class DataError(TrainerError):
    pass


class Source(typing.Protocol):
    """What planning and the pipelines need of a data source."""

    counts: tuple[int, ...]  # records per file: all the planning reads

    def records(self, files, seed=None) -> tf.data.Dataset:
        """The records of `files` (indices: a sequence or a 1-D int64 tensor),
        unparsed; with a seed (a scalar, maybe a tensor), shuffled."""

    def parse(self, records, keys=None):
        """A batch of records -> (inputs, labels); `keys`: training's augmentation keys."""

    def read_error(self, err, epoch, step, on_progress) -> Exception | None:
        """What to stop with when a training step failed with `err` (None: not the
        data); a search through the files calls on_progress() as it goes."""

    def statistics(self) -> dict:
        """task.statistics_from over these records (the training source's go into the model)."""


@dataclasses.dataclass(frozen=True, eq=False)
class ArraySource:
    """Examples held in memory. A record is a row index; parsing gathers the rows."""

    features: np.ndarray  # or a dict of arrays, for a model of several inputs
    labels: np.ndarray

    @property
    def counts(self):
        # One "file": rows in memory have nothing to shard by but the rows themselves.
        return (len(self.labels),)

    def records(self, files, seed=None):
        """The row indices (`files` is always the one "file"); with a seed, shuffled."""
        rows = tf.data.Dataset.range(len(self.labels))
        if seed is None:
            return rows
        return rows.shuffle(len(self.labels), seed=seed, reshuffle_each_iteration=False)

    def parse(self, rows, keys=None):
        """The rows' examples, prepared by the task (training: with their keys)."""
        inputs = tf.nest.map_structure(lambda values: tf.gather(values, rows), self.features)
        labels = tf.gather(self.labels, rows)
        return task.prepare_batch(inputs, keys), labels

    def read_error(self, err, epoch, step, on_progress):
        """Rows in memory: a failed step is never a bad record."""
        del err, epoch, step, on_progress

    def statistics(self):
        """Summed over the rows in memory, as evaluation prepares them."""
        return self.learned

    @functools.cached_property
    def learned(self):
        # Once per source (the doctor and the tests build many engines from one),
        # parsed in the input pipeline: parsing eagerly a batch at a time takes
        # seconds where the task prepares each image alone (tf.map_fn).
        rows = self.records([0]).batch(STATISTICS_BATCH)
        parsed = rows.map(self.parse, num_parallel_calls=tf.data.AUTOTUNE)
        return task.statistics_from(statistics.summarize(parsed))


@dataclasses.dataclass(frozen=True)
class ShardPlan:
    """How a split's files are split across workers."""

    # FILE: each worker reads only its own files. DATA: every worker reads all of
    # them and keeps its share of the records (training: every W-th record).
    policy: tf.data.experimental.AutoShardPolicy
    # The files (indices) each worker reads.
    worker_files: tuple[tuple[int, ...], ...]
    # The global steps of one pass over the data, the same on every worker:
    # training's full global batches; every batch of an evaluation, whose last
    # ones may be short or, on a worker out of records, empty.
    steps_per_pass: int

    @property
    def num_workers(self):
        return len(self.worker_files)


def plan_shards(counts, num_workers, global_batch_size):
    """FILE when whole files per worker fill all the global batches a pass holds
    (total // global batch) but fewer than one per worker, or 1%
    (max_file_sharding_loss); DATA, which fills them all, otherwise.

    DATA has every worker read and shuffle every file, every pass: at scale
    (ImageNet's 1024 shards on a few 8-GPU workers) that costs far more than the
    step or two per pass FILE may leave out, so FILE wins unless it loses more.
    Either way, every worker runs steps_per_pass steps per pass and has the
    records for them, and each example is read for training at most once per pass.
    """
    total = sum(counts)
    steps = total // global_batch_size
    if steps == 0:
        raise DataError(
            f"the training data has {total} examples, fewer than one global batch of"
            f" {global_batch_size} - use more data, or a smaller --per-replica-batch-size"
            " or --accumulate-steps"
        )
    if num_workers > 1 and len(counts) >= num_workers:
        assignment = balanced_assignment(counts, num_workers)
        worker_batch = global_batch_size // num_workers
        file_steps = min(sum(counts[i] for i in files) // worker_batch for files in assignment)
        if file_steps > 0 and steps - file_steps <= max_file_sharding_loss(steps, num_workers):
            if file_steps < steps:
                log.info(
                    "input sharding: whole files give %d of the %d steps a pass holds"
                    " (%d examples a pass left out), instead of every worker reading"
                    " every file",
                    file_steps,
                    steps,
                    total - file_steps * global_batch_size,
                )
            return ShardPlan(FILE, assignment, file_steps)
    return data_sharding(len(counts), num_workers, steps)


def max_file_sharding_loss(steps_per_pass, num_workers):
    """The steps of a pass FILE sharding may leave out: each worker's own files
    leave it less than one of its batches short, so up to a step per worker
    beyond the first; on long passes, 1%."""
    return max(num_workers - 1, steps_per_pass // 100)


def data_sharding(num_files, num_workers, steps_per_pass):
    """DATA: every worker reads every file and keeps every num_workers-th record."""
    every_file = tuple(range(num_files))
    return ShardPlan(DATA, (every_file,) * num_workers, steps_per_pass)


def balanced_assignment(counts, num_workers):
    """Files to workers, largest first to the least loaded: shares as even as
    whole files allow."""
    least_loaded = [(0, worker) for worker in range(num_workers)]  # a heap
    assigned = [[] for _ in range(num_workers)]
    for index in sorted(range(len(counts)), key=lambda i: (-counts[i], i)):
        load, worker = heapq.heappop(least_loaded)
        assigned[worker].append(index)
        heapq.heappush(least_loaded, (load + counts[index], worker))
    return tuple(tuple(sorted(files)) for files in assigned)


def plan_evaluation(counts, num_workers, global_batch_size):
    """FILE whenever every worker can have a file that holds records: files
    assigned as training's (balanced_assignment), each read by one worker only.
    DATA, every worker reading every such file, only when there are fewer of
    them than workers (in-memory data: one "file").

    Evaluation keeps every example, and each global step is an all-reduce across
    the workers, so all run the same steps: as many as the most loaded worker's
    records need, the others' streams padded with empty batches (the evaluator
    runs the model on a blank example for them, which adds nothing). The steps
    follow from the record counts alone, so the workers agree without talking.
    DATA would have every worker read the whole set at every evaluation
    (ImageNet's validation set: 6.4 GB per worker) and stop getting faster with
    more workers; FILE reads it once across them, at the price of the steps the
    most loaded worker needs beyond an even split (its share is less than one
    file over the average).
    """
    # Empty files go to no worker: nothing in them to evaluate, and under FILE
    # every worker needs a file to read (a source reads at least one).
    holding = tuple(index for index, count in enumerate(counts) if count > 0)
    if len(holding) >= num_workers:
        assignment = balanced_assignment([counts[index] for index in holding], num_workers)
        worker_files = tuple(tuple(holding[i] for i in files) for files in assignment)
        worker_batch = global_batch_size // num_workers
        steps = max(
            batches_needed(sum(counts[index] for index in files), worker_batch)
            for files in worker_files
        )
        return ShardPlan(FILE, worker_files, steps)
    steps = batches_needed(sum(counts), global_batch_size)
    return ShardPlan(DATA, (holding,) * num_workers, steps)


def batches_needed(count, batch_size):
    """Batches that hold `count` examples, the last one short."""
    return -(-count // batch_size)


@dataclasses.dataclass
class RunPlan:
    """What the data looks like for this strategy, checked before training. The
    batch sizes are decided here, once: every pipeline and engine reads them."""

    per_replica_batch_size: int  # a replica's forward pass (a micro-batch)
    replicas: int  # in sync, over all workers
    accumulate_steps: int  # micro-batches per optimizer update
    global_batch_size: int  # one update: per_replica_batch_size x replicas x accumulate_steps
    steps_per_epoch: int  # optimizer updates
    shards: ShardPlan
    train: Source
    evaluation: Source

    @property
    def replica_batch_size(self):
        """A replica's examples for one step (one update)."""
        return self.per_replica_batch_size * self.accumulate_steps

    @property
    def evaluation_batch_size(self):
        """Evaluation's global batch: one micro-batch per replica (no gradients
        to accumulate)."""
        return self.per_replica_batch_size * self.replicas

    @property
    def evaluation_shards(self):
        """Evaluation's ShardPlan (plan_evaluation): each worker's files and the
        global steps all of them run. Derived, not stored: it follows the workers
        and batch sizes of a plan replaced with others."""
        return plan_evaluation(
            self.evaluation.counts, self.shards.num_workers, self.evaluation_batch_size
        )


def make_plan(
    train,
    evaluation,
    per_replica_batch_size,
    replicas=1,
    num_workers=1,
    steps_per_epoch=None,
    accumulate_steps=1,
):
    """Check the sizes and plan the sharding; steps_per_epoch None: one pass."""
    global_batch_size = per_replica_batch_size * replicas * accumulate_steps
    if sum(evaluation.counts) == 0:
        raise DataError("the evaluation data is empty - give it at least one example")
    shards = plan_shards(train.counts, num_workers, global_batch_size)
    plan = RunPlan(
        per_replica_batch_size=per_replica_batch_size,
        replicas=replicas,
        accumulate_steps=accumulate_steps,
        global_batch_size=global_batch_size,
        steps_per_epoch=steps_per_epoch or shards.steps_per_pass,
        shards=shards,
        train=train,
        evaluation=evaluation,
    )
    if num_workers > 1:
        log.info(
            "input sharding across %d workers: train %s, eval %s",
            num_workers,
            shards.policy.name,
            plan.evaluation_shards.policy.name,
        )
    return plan


def batch_records(records, per_replica_batch_size):
    """Full batches only: every replica gets exactly its share at every step."""
    return records.batch(per_replica_batch_size, drop_remainder=True)


def worker_batches(plan, seed, epoch, first_step, worker=0, epochs=1, on_skip_progress=None):
    """Worker `worker`'s per-replica batches from step `first_step` of `epoch` to the
    end of `epochs` epochs: each step takes one batch per replica of this worker.

    A resume opens the block of files that holds its first record and skips the
    records before it in that block (reading, no parsing, no training step):
    at most one block, wherever in the pass it lands (pass_records). The
    controller makes one pipeline for the rest of a run, so that is paid once,
    when a resumed run starts. The skip calls `on_skip_progress(skipped, total)`
    every SKIP_REPORT_RECORDS records (the watchdog's progress: a block on slow
    storage is not a stall; and the chief's progress display).
    """
    shards = plan.shards
    batches_per_step = plan.replicas // shards.num_workers  # this worker's replicas
    files = shards.worker_files[worker]
    width = block_width(len(files))
    # DATA: every worker reads the same records and keeps every W-th of them.
    sharing, share = (shards.num_workers, worker) if shards.policy == DATA else (1, 0)
    first_pass, offset = divmod(epoch * plan.steps_per_epoch + first_step, shards.steps_per_pass)
    first_record = offset * batches_per_step * plan.replica_batch_size  # of this worker's
    start = first_record * sharing + share  # of the pass's records

    def read_block(pass_index, block_index, block_files):
        return plan.train.records(block_files, seed=block_seed(seed, pass_index, block_index))

    def pass_records(pass_index, first_block=0, skip=0, on_progress=None):
        """Pass `pass_index`'s records from block `first_block` on, the first
        `skip` records of that block skipped (its progress filter holds that
        block only)."""
        order = pass_files(files, seed, pass_index)
        landing = read_block(
            pass_index, first_block, order[first_block * width : (first_block + 1) * width]
        )
        rest = tf.data.Dataset.from_tensor_slices(order[(first_block + 1) * width :])
        rest = rest.batch(width).enumerate(first_block + 1)
        rest = rest.flat_map(lambda index, block_files: read_block(pass_index, index, block_files))
        return skipped(landing, skip, on_progress).concatenate(rest)

    def batched(pass_index, records, from_record, own):
        """A pass's records from this worker's record `from_record` on, as its
        batches; `own`: the first of them this worker keeps (DATA)."""
        records = records.shard(sharing, own)
        batches = batch_records(records.enumerate(from_record), plan.replica_batch_size).map(
            lambda positions, batch: (
                example_keys(seed + pass_index, positions, worker, shards.num_workers),
                batch,
            )
        )
        taken = from_record // plan.replica_batch_size
        return batches.take(shards.steps_per_pass * batches_per_step - taken)

    def one_pass(pass_index):
        return batched(pass_index, pass_records(pass_index), 0, share)

    # The pass the run starts in, from the block that holds its first record,
    # found from the record counts, skipped to that record (this worker's: DATA
    # keeps every W-th from there); each pass is built alike (its index a tensor).
    block, inside = find_block(
        plan.train.counts, pass_files(files, seed, first_pass).numpy(), width, start
    )
    first = tf.data.Dataset.from_tensors(tf.constant(first_pass, tf.int64)).flat_map(
        lambda pass_index: batched(
            pass_index,
            pass_records(pass_index, block, inside, on_skip_progress),
            first_record,
            0,
        )
    )
    batches = first.concatenate(tf.data.Dataset.counter(first_pass + 1).flat_map(one_pass))
    batches = batches.take((epochs * plan.steps_per_epoch - first_step) * batches_per_step)
    batches = batches.map(
        lambda keys, records: plan.train.parse(records, keys), num_parallel_calls=tf.data.AUTOTUNE
    )
    return batches.prefetch(tf.data.AUTOTUNE)


def block_width(num_files):
    """Files a block: BLOCKS_PER_PASS blocks a pass where the files allow, at
    most BLOCK_FILES files each."""
    return max(1, min(BLOCK_FILES, num_files // BLOCKS_PER_PASS))


def pass_files(files, seed, pass_index):
    """Pass `pass_index`'s order of `files` (indices), a 1-D int64 tensor: a stateless
    shuffle, so a resume computes it eagerly and a later pass in the pipeline
    (its index a tensor) alike; on the host, as the pipeline runs."""
    with tf.device("/CPU:0"):
        return tf.random.experimental.stateless_shuffle(
            tf.constant(files, tf.int64),
            seed=tf.stack([tf.cast(seed, tf.int64), tf.cast(pass_index, tf.int64)]),
            alg="philox",
        )


def block_seed(seed, pass_index, block_index):
    """The shuffle seed of one block of one pass."""
    return tf.random.stateless_uniform(
        [],
        seed=tf.stack([seed + pass_index, tf.cast(block_index, tf.int64)]),
        minval=None,
        maxval=None,
        dtype=tf.int64,
        alg="philox",
    )


def find_block(counts, order, width, record):
    """(the block of `order` that holds pass record `record`, the records of that
    block before it), from the record counts alone."""
    sizes = [
        sum(counts[index] for index in order[begin : begin + width])
        for begin in range(0, len(order), width)
    ]
    ends = np.cumsum(sizes)
    block = int(np.searchsorted(ends, record, side="right"))
    return block, record - int(ends[block] - sizes[block])


def skipped(records, count, on_progress=None):
    """records.skip(count), calling on_progress(records skipped so far, count)
    every SKIP_REPORT_RECORDS records skipped when given."""
    if on_progress is None or count == 0:
        return records.skip(count)

    def report(position):
        on_progress(int(position), count)
        return True

    def kept(position, record):
        reporting = (position < count) & (position % SKIP_REPORT_RECORDS == 0)
        reported = tf.cond(
            reporting,
            lambda: tf.py_function(report, [position], tf.bool),
            lambda: tf.constant(False),
        )
        with tf.control_dependencies([reported]):
            return position >= count

    return records.enumerate().filter(kept).map(lambda position, record: record)


def example_keys(pass_seed, positions, worker, num_workers):
    """Each example's augmentation key: (seed + pass, its position in the pass),
    where a worker's p-th record is record p * workers + worker of the unsharded
    order (DATA): the same keys whatever the replicas and workers."""
    positions = positions * num_workers + worker
    return tf.stack([tf.fill(tf.shape(positions), pass_seed), positions], axis=1)


def training_input(strategy, plan, seed, epoch, first_step=0, epochs=1, on_skip_progress=None):
    """The distributed batches of `epochs` epochs from step `first_step` of `epoch`
    on, one pipeline per worker (`on_skip_progress`: see worker_batches)."""

    def dataset_fn(context):
        check_planned_for(plan, context)
        return worker_batches(
            plan,
            seed,
            epoch,
            first_step,
            context.input_pipeline_id,
            epochs,
            on_skip_progress,
        )

    return strategy.distribute_datasets_from_function(dataset_fn)


def check_planned_for(plan, context):
    """A plan fits one strategy: its workers and replicas decide every batch."""
    planned = (plan.shards.num_workers, plan.replicas)
    if (context.num_input_pipelines, context.num_replicas_in_sync) != planned:
        raise DataError(
            f"the plan is for {planned[0]} worker(s) and {planned[1]} replica(s), the"
            f" strategy has {context.num_input_pipelines} and {context.num_replicas_in_sync}"
            " - plan with training.plan_run(config, strategy)"
        )


def evaluation_batches(plan, worker=0):
    """Worker `worker`'s share of the evaluation set, in order: per-replica batches,
    one per replica of the worker for each of the evaluation's global steps
    (plan.evaluation_shards). Every example counts once, and a replica's share
    may be short or empty (the evaluation sums handle both); every worker has as
    many batches as the others, so none waits in the all-reduce.

    FILE: a worker reads only its own files, in batches of its replicas' part of
    a global batch, then empty ones once its records run out. DATA: it reads
    every file and parses only its slice of each global batch of serialized
    records, cut before parsing.
    """
    shards = plan.evaluation_shards
    num_workers = shards.num_workers
    per_replica_batch_size = plan.per_replica_batch_size
    worker_batch = plan.evaluation_batch_size // num_workers
    source = plan.evaluation
    records = source.records(shards.worker_files[worker])
    if shards.policy == FILE:
        spec = records.element_spec
        empty = tf.data.Dataset.from_tensors(tf.zeros([0, *spec.shape], spec.dtype))
        # The steps are the most loaded worker's batches: take() cuts only padding.
        shares = records.batch(worker_batch).concatenate(empty.repeat())
        shares = shares.take(shards.steps_per_pass)
    else:
        start = worker * worker_batch
        shares = records.batch(plan.evaluation_batch_size).map(
            lambda batch: batch[start : start + worker_batch]
        )
    replicas = plan.replicas // num_workers
    batches = shares.flat_map(
        lambda share: tf.data.Dataset.range(replicas).map(
            lambda replica: share[
                replica * per_replica_batch_size : (replica + 1) * per_replica_batch_size
            ]
        )
    )
    return batches.map(source.parse, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def held_out_sample(plan, batches):
    """The evaluation set's first `batches` full per-replica batches, for one
    device (training/batch_norm_check.py); its files read a few at once, as training
    reads them."""
    source = plan.evaluation
    records = source.records(tuple(range(len(source.counts))))
    return (
        records.batch(plan.per_replica_batch_size, drop_remainder=True)
        .take(batches)
        .map(source.parse)
    )


def evaluation_input(strategy, plan):
    """The distributed evaluation batches, one pipeline per worker."""

    def dataset_fn(context):
        check_planned_for(plan, context)
        return evaluation_batches(plan, context.input_pipeline_id)

    return strategy.distribute_datasets_from_function(dataset_fn)
