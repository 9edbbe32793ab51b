"""Training and evaluation data, batched with the global batch size and checked.

To train on your own data, change `load_examples`: it returns unbatched
(features, label) datasets. Everything after it (cardinality guards, global
batching, sharding, the data order) stays as it is.

The training data order is a pure function of (seed, epoch, step): a run resumed
at step S of epoch E builds epoch E's batches again and starts at batch S, so it
sees what an uninterrupted run sees without checkpointing a data iterator (which
TensorFlow cannot do for a distributed dataset, tensorflow/tensorflow#56372).
"""

import dataclasses
import logging
{%- if cookiecutter.data_source == "tfrecord" %}
from pathlib import Path
{%- endif %}

import numpy as np
import tensorflow as tf

from {{ cookiecutter.package_name }} import TrainerError{% if cookiecutter.data_source == "tfrecord" %}, tfrecords{% endif %}
from {{ cookiecutter.package_name }}.strategy import global_batch_size, worker_count

log = logging.getLogger(__name__)

NUM_FEATURES = 20
NUM_CLASSES = 4
SHUFFLE_BUFFER = 10_000
DATA = tf.data.experimental.AutoShardPolicy.DATA
# The synthetic task is fixed (its own seed); --seed changes shuffling and init.
TASK_SEED = 1234
{%- if cookiecutter.data_source == "synthetic" %}
TRAIN_EXAMPLES = 4096
EVAL_EXAMPLES = 1024
{%- endif %}


class DataError(TrainerError):
    pass


def synthetic_arrays(num_examples, seed):
    """A seeded classification task a small MLP learns well above chance (25%).

    Labels come from a fixed random two-layer teacher network, so the task is
    the same for every `seed`; `seed` only picks which examples are drawn.
    """
    teacher = np.random.default_rng(TASK_SEED)
    hidden_weights = teacher.normal(size=(NUM_FEATURES, 32))
    output_weights = teacher.normal(size=(32, NUM_CLASSES))
    features = np.random.default_rng(seed).normal(size=(num_examples, NUM_FEATURES))
    labels = np.argmax(np.tanh(features @ hidden_weights) @ output_weights, axis=1)
    return features.astype("float32"), labels.astype("int32")


{%- if cookiecutter.data_source == "tfrecord" %}


def make_data(output_dir, num_files, examples, seed=0):
    """A sample data set in the format `train` reads: train and eval shards."""
    if num_files < 1 or examples < num_files:
        raise DataError(
            f"--num-files {num_files} --examples {examples}: need at least one file"
            " and one example per file - raise --examples or lower --num-files"
        )
    output = Path(output_dir)
    output.mkdir(parents=True, exist_ok=True)
    train = tfrecords.write_split(output, "train", *synthetic_arrays(examples, seed), num_files)
    eval_count = max(examples // 4, 1)
    evaluation = tfrecords.write_split(
        output, "eval", *synthetic_arrays(eval_count, seed + 1), 1
    )
    log.info("wrote %d train and %d eval examples to %s", examples, eval_count, output)
    return train + evaluation
{%- endif %}


def load_examples(config, num_workers=1):
    """The unbatched (features, label) training and evaluation datasets."""
{%- if cookiecutter.data_source == "synthetic" %}
    train = tf.data.Dataset.from_tensor_slices(synthetic_arrays(TRAIN_EXAMPLES, seed=0))
    evaluation = tf.data.Dataset.from_tensor_slices(synthetic_arrays(EVAL_EXAMPLES, seed=1))
    # In-memory data has no files to shard by: each worker takes its part of each batch.
    log.info("input sharding across workers: %s", DATA.name)
    return with_shard_policy(train, DATA), with_shard_policy(evaluation, DATA)
{%- else %}
    splits = []
    for split in ("train", "eval"):
        files = tfrecords.find_files(config.data_dir, split)
        counts = tfrecords.check_files(files, NUM_FEATURES)
        # Training: every worker on the same global batches (see epoch_batches).
        policy = shard_policy(counts, num_workers) if split == "eval" else DATA
        log.info("%s input sharding across workers: %s (%d files)", split, policy.name, len(files))
        examples = tfrecords.read_examples(files, NUM_FEATURES, sum(counts))
        splits.append(with_shard_policy(examples, policy))
    train, evaluation = splits
    return train, evaluation


def shard_policy(counts, num_workers):
    """For evaluation: whole files per worker (FILE) when the files split the
    examples evenly across the workers; else every worker reads all files and
    takes its part of each batch (DATA)."""
    shares = [sum(counts[worker::num_workers]) for worker in range(num_workers)]
    if len(counts) % num_workers == 0 and len(set(shares)) == 1:
        return tf.data.experimental.AutoShardPolicy.FILE
    return DATA
{%- endif %}


def with_shard_policy(dataset, policy):
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = policy
    return dataset.with_options(options)


@dataclasses.dataclass
class RunPlan:
    """What the data looks like for this strategy, checked before training."""

    global_batch_size: int
    steps_per_epoch: int
    train_examples: tf.data.Dataset
    eval_examples: tf.data.Dataset
    # An explicit steps_per_epoch streams the data (repeated) within an epoch.
    repeat: bool


def plan_run(config, strategy):
    """Load and check the data for `strategy`: sizes, steps per epoch."""
    batch = global_batch_size(strategy, config.per_replica_batch_size)
    train, evaluation = load_examples(config, worker_count(strategy))
    num_train = count_examples(train, batch, config.steps_per_epoch, "training")
    # Evaluation keeps a short last batch: any finite, non-empty set will do.
    if int(evaluation.cardinality()) == 0:
        raise DataError("the evaluation dataset is empty - return some examples from load_examples")
    count_examples(evaluation, 1, split="evaluation")
    return RunPlan(
        global_batch_size=batch,
        steps_per_epoch=steps_per_epoch_for(num_train, batch, config.steps_per_epoch),
        train_examples=train,
        eval_examples=evaluation,
        repeat=config.steps_per_epoch is not None,
    )


def count_examples(examples, global_batch_size, steps_per_epoch=None, split="training"):
    """Check the dataset before training; return its size (None if unbounded).

    An infinite or unknown size needs an explicit steps_per_epoch, and a finite
    one must fill at least one global batch.
    """
    cardinality = int(examples.cardinality())
    if cardinality == tf.data.INFINITE_CARDINALITY:
        if steps_per_epoch is None:
            raise DataError(
                f"the {split} dataset is infinite (repeat()) - set --steps-per-epoch,"
                " or remove the repeat()"
            )
        return None
    if cardinality == tf.data.UNKNOWN_CARDINALITY:
        if steps_per_epoch is None:
            raise DataError(
                f"the {split} dataset has an unknown size (filter() or a file reader)"
                " - set --steps-per-epoch, or call"
                " dataset.apply(tf.data.experimental.assert_cardinality(N))"
            )
        return None
    if cardinality < global_batch_size:
        raise DataError(
            f"the {split} dataset has {cardinality} examples, fewer than one global"
            f" batch of {global_batch_size} - use more data or a smaller"
            " --per-replica-batch-size"
        )
    return cardinality


def steps_per_epoch_for(num_examples, global_batch_size, steps_per_epoch=None):
    """Full global batches per epoch: the explicit value, or one pass over the data."""
    return steps_per_epoch or num_examples // global_batch_size


def training_batches(examples, global_batch_size, seed, repeat=False):
    """Shuffled global batches; the short last batch is dropped so every replica
    gets exactly global_batch_size // replicas examples at every step."""
    # The same order on every pass over this dataset: the order is chosen by the
    # seed alone (each epoch gets its own, see epoch_batches), never by how many
    # iterators were opened on it before.
    dataset = examples.shuffle(SHUFFLE_BUFFER, seed=seed, reshuffle_each_iteration=False)
    if repeat:
        dataset = dataset.repeat()
    dataset = dataset.batch(global_batch_size, drop_remainder=True)
    return dataset.prefetch(tf.data.AUTOTUNE)


def epoch_batches(examples, global_batch_size, seed, epoch, first_step, steps_per_epoch, repeat):
    """Epoch `epoch`'s global batches from step `first_step` on.

    Epoch e is the first `steps_per_epoch` batches shuffled with seed + e, so the
    batches from (epoch, step) on are the same in a resumed run as in an
    uninterrupted one. skip() runs the input pipeline over the skipped batches
    (reading and shuffling, no training step); it is only paid on a resume.
    """
    batches = training_batches(examples, global_batch_size, seed + epoch, repeat)
    batches = batches.take(steps_per_epoch).skip(first_step)
    # Across workers, every worker reads the same global batches and takes its part
    # (DATA), so step S is global batch S everywhere. With whole files per worker
    # (FILE), a step takes 1/workers of a worker's batch, and skipping S batches
    # would land S * workers steps ahead.
    return with_shard_policy(batches, DATA)


def evaluation_batches(examples, global_batch_size):
    """The evaluation set in global batches, in order, the last one short: every
    example counts once (a replica may get a short or an empty share of the last
    batch; the evaluation sums handle both)."""
    return examples.batch(global_batch_size).prefetch(tf.data.AUTOTUNE)
