"""Training and evaluation input: planned from record counts, read by each worker.
{% if cookiecutter.data_source == "tfrecord" %}
The data is TFRecord shards (their format: task.py) listed in the data
directory's manifest with their record counts (manifest.py). To train on your
own data, write it in that format (or change the format in task.py) and run
`index`. Planning reads the manifest, never the data, so start-up does
not grow with the data set.
{%- else %}
The data is the task's seeded sample (task.sample_examples), held in memory.
To train on your own arrays, return them from `load_sources`; for data that does not fit in memory,
bake the project with data_source=tfrecord.
{%- endif %}
Each example gets a key of its own drawn from (seed, pass, position) for the
task's augmentation, so augmentation is part of that pure function.

The training order is a pure function of (seed, epoch, step). The data is read
in passes: pass p shuffles the files, then the records, with seed + p. Epoch e
is global steps e*K .. e*K+K-1 of the passes laid end to end (K: steps per
epoch), so a --steps-per-epoch shorter than a pass continues the stream in the
next epoch, and a run resumed at step S of epoch E rebuilds the pass that holds
that step and skips to it: it sees what an uninterrupted run sees, without
checkpointing a data iterator (which TensorFlow cannot do for a distributed
dataset, tensorflow/tensorflow#56372).

Each worker builds its own pipeline (strategy.distribute_datasets_from_function)
and feeds each of its replicas one per-replica batch per step. plan_shards
decides whether a worker reads only its own files (FILE) or all of them,
keeping every W-th record (DATA).
"""

import dataclasses
import heapq
import logging

import numpy as np
import tensorflow as tf

from {{ cookiecutter.package_name }} import TrainerError{% if cookiecutter.data_source == "tfrecord" %}, manifest, task, tfrecords{% else %}, task{% endif %}
from {{ cookiecutter.package_name }}.strategy import global_batch_size, worker_count

log = logging.getLogger(__name__)

{%- if cookiecutter.data_source == "synthetic" %}
{%- if cookiecutter.task == "image" %}
TRAIN_EXAMPLES = 2048
EVAL_EXAMPLES = 512
{%- else %}
TRAIN_EXAMPLES = 4096
EVAL_EXAMPLES = 1024
{%- endif %}
{%- endif %}
{%- if cookiecutter.data_source == "tfrecord" %}
# Files read at once by each worker's pipeline.
READ_PARALLELISM = 16
# The record shuffle buffer holds serialized records, at most this many bytes of
# them (and at most SHUFFLE_RECORDS): filling it is start-up time and host memory.
SHUFFLE_BYTES = 256 * 2**20
SHUFFLE_RECORDS = 10_000
{%- endif %}
DATA = tf.data.experimental.AutoShardPolicy.DATA
FILE = tf.data.experimental.AutoShardPolicy.FILE


class DataError(TrainerError):
    pass


@dataclasses.dataclass(frozen=True, eq=False)
class ArraySource:
    """Examples held in memory. A record is a row index; parsing gathers the rows."""

    features: np.ndarray
    labels: np.ndarray

    @property
    def counts(self):
        # One "file": rows in memory have nothing to shard by but the rows themselves.
        return (len(self.labels),)

    def records(self, files, seed=None):
        """The row indices (`files` is always the one "file"); with a seed, shuffled."""
        rows = tf.data.Dataset.range(len(self.labels))
        return rows if seed is None else rows.shuffle(len(self.labels), seed=seed)

    def parse(self, rows, keys=None):
        """The rows' examples, prepared by the task (training: with their keys)."""
        inputs, labels = tf.gather(self.features, rows), tf.gather(self.labels, rows)
        return task.prepare_batch(inputs, keys), labels
{%- if cookiecutter.data_source == "tfrecord" %}


@dataclasses.dataclass(frozen=True)
class RecordSource:
    """TFRecord shards. A record is a serialized example; parsing takes a batch."""

    files: tuple[str, ...]
    counts: tuple[int, ...]
    bytes: int
{%- if cookiecutter.task == "image" %}
    # Subtracted from every stored label (1 for 1-based labels).
    label_offset: int = 0
{%- endif %}

    def records(self, files, seed=None):
        """The records of `files` (indices); with a seed, files and records shuffled."""
        paths = tf.data.Dataset.from_tensor_slices([self.files[index] for index in files])
        if seed is not None:
            paths = paths.shuffle(len(files), seed=seed)
        # Several files at once. deterministic=True: the order must be a function of
        # the seed, for exact resume and because DATA sharding has every worker keep
        # every W-th record of the same sequence.
        records = paths.interleave(
            tf.data.TFRecordDataset,
            cycle_length=min(len(files), READ_PARALLELISM),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
        return records if seed is None else records.shuffle(self.shuffle_buffer(), seed=seed)

    def shuffle_buffer(self):
        record_bytes = max(self.bytes // max(sum(self.counts), 1), 1)
        return max(1, min(SHUFFLE_RECORDS, SHUFFLE_BYTES // record_bytes))

    def parse(self, records, keys=None):
        """A batch of records, parsed by the task (training: with their keys)."""
{%- if cookiecutter.task == "image" %}
        inputs, labels = task.parse_batch(records, keys)
        return inputs, labels - self.label_offset
{%- else %}
        return task.parse_batch(records, keys)
{%- endif %}


def make_data(output_dir, num_files, examples, seed=0):
    """A sample data set in the format `train` reads: train and eval shards, indexed."""
    if num_files < 1 or examples < num_files:
        raise DataError(
            f"--num-files {num_files} --examples {examples}: need at least one file"
            " and one example per file - raise --examples or lower --num-files"
        )
    tf.io.gfile.makedirs(str(output_dir))
    tfrecords.write_split(output_dir, "train", *task.sample_examples(examples, seed), num_files)
    eval_count = max(examples // 4, 1)
    tfrecords.write_split(output_dir, "eval", *task.sample_examples(eval_count, seed + 1), 1)
    manifest.index(str(output_dir))
    log.info("wrote %d train and %d eval examples to %s", examples, eval_count, output_dir)
{%- endif %}


def load_sources(config):
    """The training and evaluation sources."""
{%- if cookiecutter.data_source == "synthetic" %}
    del config  # the synthetic task takes no settings
    return (
        ArraySource(*task.sample_examples(TRAIN_EXAMPLES, seed=0)),
        ArraySource(*task.sample_examples(EVAL_EXAMPLES, seed=1)),
    )
{%- else %}
{%- if cookiecutter.task == "image" %}
    splits = manifest.load(config.data_dir, task.NUM_CLASSES, config.label_offset)
{%- else %}
    splits = manifest.load(config.data_dir, task.INPUT_SHAPE, task.NUM_CLASSES)
{%- endif %}
    return tuple(
        RecordSource(
            files=tuple(shard.path for shard in splits[split]),
            counts=tuple(shard.records for shard in splits[split]),
            bytes=sum(shard.bytes for shard in splits[split]),
{%- if cookiecutter.task == "image" %}
            label_offset=config.label_offset,
{%- endif %}
        )
        for split in ("train", "eval")
    )
{%- endif %}


@dataclasses.dataclass(frozen=True)
class ShardPlan:
    """How the training files are split across workers."""

    # FILE: each worker reads only its own files. DATA: every worker reads all of
    # them and keeps every W-th record.
    policy: tf.data.experimental.AutoShardPolicy
    # The files (indices) each worker reads.
    worker_files: tuple[tuple[int, ...], ...]
    # Full global batches in one pass over the data.
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
            f" {global_batch_size} - use more data or a smaller --per-replica-batch-size"
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


def evaluation_policy(counts, num_workers):
    """Evaluation keeps every example, so a worker with fewer batches than the
    others would stall them: whole files per worker (FILE) only when the files
    split the examples evenly, else DATA."""
{%- if cookiecutter.data_source == "synthetic" %}
    del counts, num_workers
    return DATA  # in-memory rows: nothing to shard by but the rows
{%- else %}
    shares = [sum(counts[worker::num_workers]) for worker in range(num_workers)]
    if len(counts) % num_workers == 0 and len(set(shares)) == 1:
        return FILE
    return DATA
{%- endif %}


@dataclasses.dataclass
class RunPlan:
    """What the data looks like for this strategy, checked before training."""

    global_batch_size: int
    steps_per_epoch: int
    shards: ShardPlan
    train: {% if cookiecutter.data_source == "tfrecord" %}RecordSource | {% endif %}ArraySource
    evaluation: {% if cookiecutter.data_source == "tfrecord" %}RecordSource | {% endif %}ArraySource
    evaluation_policy: tf.data.experimental.AutoShardPolicy


def plan_run(config, strategy):
    """The run's plan, from the record counts alone (no record is read)."""
    batch = global_batch_size(strategy, config.per_replica_batch_size)
    workers = worker_count(strategy)
    train, evaluation = load_sources(config)
    return make_plan(train, evaluation, batch, workers, config.steps_per_epoch)


def make_plan(train, evaluation, global_batch_size, num_workers=1, steps_per_epoch=None):
    """Check the sizes and plan the sharding; steps_per_epoch None: one pass."""
    if sum(evaluation.counts) == 0:
        raise DataError("the evaluation data is empty - give it at least one example")
    shards = plan_shards(train.counts, num_workers, global_batch_size)
    policy = evaluation_policy(evaluation.counts, num_workers)
    if num_workers > 1:
        log.info(
            "input sharding across %d workers: train %s, eval %s",
            num_workers,
            shards.policy.name,
            policy.name,
        )
    return RunPlan(
        global_batch_size=global_batch_size,
        steps_per_epoch=steps_per_epoch or shards.steps_per_pass,
        shards=shards,
        train=train,
        evaluation=evaluation,
        evaluation_policy=policy,
    )


def batch_records(records, per_replica_batch_size):
    """Full batches only: every replica gets exactly its share at every step."""
    return records.batch(per_replica_batch_size, drop_remainder=True)


def worker_batches(
    plan, seed, epoch, first_step, worker=0, num_workers=1, per_replica_batch_size=None, epochs=1
):
    """Worker `worker`'s per-replica batches from step `first_step` of `epoch` to the
    end of `epochs` epochs: each step takes one batch per replica of this worker.

    skip() runs the pass over the batches before `first_step` (reading, no parsing,
    no training step), at most one pass. The controller makes one pipeline for the
    rest of a run, so that is paid once when it starts: never at an epoch start,
    and only on a resume (a fresh run starts at a pass's start).
    """
    per_replica_batch_size = per_replica_batch_size or plan.global_batch_size
    shards = plan.shards
    batches_per_step = plan.global_batch_size // num_workers // per_replica_batch_size
    files = shards.worker_files[worker]
    first_pass, offset = divmod(epoch * plan.steps_per_epoch + first_step, shards.steps_per_pass)

    def one_pass(index):
        records = plan.train.records(files, seed=seed + index)
        if shards.policy == DATA:
            records = records.shard(num_workers, worker)
        batches = batch_records(records.enumerate(), per_replica_batch_size).map(
            lambda positions, batch: (
                example_keys(seed + index, positions, worker, num_workers),
                batch,
            )
        )
        return batches.take(shards.steps_per_pass * batches_per_step)

    batches = tf.data.Dataset.counter(first_pass).flat_map(one_pass)
    batches = batches.skip(offset * batches_per_step)
    batches = batches.take((epochs * plan.steps_per_epoch - first_step) * batches_per_step)
    batches = batches.map(
        lambda keys, records: plan.train.parse(records, keys), num_parallel_calls=tf.data.AUTOTUNE
    )
    return batches.prefetch(tf.data.AUTOTUNE)


def example_keys(pass_seed, positions, worker, num_workers):
    """Each example's augmentation key: (seed + pass, its position in the pass),
    where a worker's p-th record is record p * workers + worker of the unsharded
    order (DATA): the same keys whatever the replicas and workers."""
    positions = positions * num_workers + worker
    return tf.stack([tf.fill(tf.shape(positions), pass_seed), positions], axis=1)


def training_input(strategy, plan, seed, epoch, first_step=0, epochs=1):
    """The distributed batches of `epochs` epochs from step `first_step` of `epoch`
    on, one pipeline per worker."""

    def dataset_fn(context):
        planned = plan.shards.num_workers
        if plan.shards.policy == FILE and context.num_input_pipelines != planned:
            raise DataError(
                f"the plan shards files for {planned} workers, the strategy has"
                f" {context.num_input_pipelines} - plan with plan_run(config, strategy)"
            )
        return worker_batches(
            plan,
            seed,
            epoch,
            first_step,
            context.input_pipeline_id,
            context.num_input_pipelines,
            context.get_per_replica_batch_size(plan.global_batch_size),
            epochs,
        )

    return strategy.distribute_datasets_from_function(dataset_fn)


def evaluation_batches(plan, worker=0, num_workers=1, per_replica_batch_size=None):
    """Worker `worker`'s share of the evaluation set, in order: per-replica batches,
    one per replica of the worker for each global batch. Every example counts
    once: the last global batch is short, so a replica's share may be short or
    empty (the evaluation sums handle both), and every worker has as many batches
    as the others, so none waits in the all-reduce.

    A worker parses only its own share: its files (FILE), or its slice of each
    global batch of serialized records (DATA), cut before parsing.
    """
    per_replica_batch_size = per_replica_batch_size or plan.global_batch_size
    worker_batch = plan.global_batch_size // num_workers
    source = plan.evaluation
    if plan.evaluation_policy == FILE:
        records = source.records(tuple(range(worker, len(source.counts), num_workers)))
        shares = records.batch(worker_batch)
    else:
        records = source.records(tuple(range(len(source.counts))))
        start = worker * worker_batch
        shares = records.batch(plan.global_batch_size).map(
            lambda batch: batch[start : start + worker_batch]
        )
    replicas = worker_batch // per_replica_batch_size
    batches = shares.flat_map(
        lambda share: tf.data.Dataset.range(replicas).map(
            lambda replica: share[
                replica * per_replica_batch_size : (replica + 1) * per_replica_batch_size
            ]
        )
    )
    return batches.map(source.parse, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def evaluation_input(strategy, plan):
    """The distributed evaluation batches, one pipeline per worker."""

    def dataset_fn(context):
        return evaluation_batches(
            plan,
            context.input_pipeline_id,
            context.num_input_pipelines,
            context.get_per_replica_batch_size(plan.global_batch_size),
        )

    return strategy.distribute_datasets_from_function(dataset_fn)
