"""Probe runs: a few training steps with the project's own engine, and their
comparison with one device.

A probe builds the engine exactly as `train` does (training.build_engine), on
the strategy seen through a BatchProbe that records the batch each replica's
step receives. The doctor's variables, batch-split and sync checks and
gpu-smoke's step checks read what the probe leaves behind.
"""

import dataclasses
import inspect
import math

import numpy as np
import tensorflow as tf

from {{ cookiecutter.package_name }}.checks.report import CheckFailed, CheckWarning
from {{ cookiecutter.package_name }}.data.pipeline import data_sharding, training_input
from {{ cookiecutter.package_name }}.distribute.compat import (
    keras,
    random_layers,
    replica_copies,
    variable_path,
)
from {{ cookiecutter.package_name }}.distribute.strategy import mirrored_strategy
from {{ cookiecutter.package_name }}.training.assembly import build_engine, prepare_run
from {{ cookiecutter.package_name }}.training.replica_sync import unsynchronized_batch_norms

# Plain SGD at a fixed rate (Adam hides scaling errors).
{%- if cookiecutter.task == "image" %}
SYNC_LEARNING_RATE = 0.005
{%- else %}
SYNC_LEARNING_RATE = 0.05
{%- endif %}
# After one step from the same weights, N replicas and one device differ by a
# share of the step's update (the largest change of a trainable weight). Float
# rounding leaves 3e-6 of it (2.7e-6 to 4.6e-6 on the sample models and on
# MobileNetV3Small, 2 logical CPUs), while a sync fault leaves 0.28 (per-replica
# batch normalization) to 1.0 (a loss averaged over the local batch, a dataset
# not distributed); a loss reduced with MEAN shows in the loss. Over several
# steps rounding grows through a deep network (MobileNetV3Small: 1.8e-5 after 4
# steps), so only the first step is compared; replica copies after all of them.
UPDATE_TOLERANCE = 1e-3
LOSS_TOLERANCE = 1e-5
# Replica copies rounded apart by a non-deterministic kernel over those steps
# differ in their last bits (about 1e-7 of their values); written apart, by far
# more.
ROUNDING_SHARE = 1e-4


def record_batch_size(features, batch_sizes):
    """Add the batch size of `features`, seen inside a replica step, to `batch_sizes`."""
    size = features.shape[0]
    if size is not None:
        batch_sizes.add(size)
    else:  # not known when traced (multi-worker input): read it when the step runs
        tf.py_function(lambda runtime: batch_sizes.add(int(runtime)), [tf.shape(features)[0]], [])


class BatchProbe:
    """The strategy, as an engine sees it, recording the batch size that each
    replica's step function receives (its first argument's first tensor)."""

    def __init__(self, strategy):
        self.strategy = strategy
        self.batch_sizes = set()

    def run(self, replica_fn, args=(), kwargs=None, options=None):
        def probed_replica_fn(*args, **kwargs):
            record_batch_size(tf.nest.flatten(args)[0], self.batch_sizes)
            return replica_fn(*args, **kwargs)

        return self.strategy.run(probed_replica_fn, args=args, kwargs=kwargs, options=options)

    def __getattr__(self, name):
        return getattr(self.strategy, name)


@dataclasses.dataclass
class ProbeRun:
    """What a few training steps with the project's own engine left behind."""

    model: keras.Model
    optimizer: keras.optimizers.Optimizer
    metrics: list
    # The reported training loss: the mean over the steps.
    loss: float
    # The first step's loss, and the trainable weights before and after it.
    first_loss: float
    initial_weights: list
    first_step_weights: list
    # Batch sizes seen inside the replica step.
    batch_sizes: set
    # Random layers that could not be put in inference mode for a comparison.
    random_layers_left_on: list

    def variables(self):
        """(owner, variable) for every model, optimizer and metric variable."""
        found, seen = [], set()
        groups = [("model", self.model.weights), ("optimizer", self.optimizer.variables)]
        groups += [("metric", metric.variables) for metric in self.metrics]
        for owner, variables in groups:
            for variable in variables:
                if id(variable) not in seen:
                    seen.add(id(variable))
                    found.append((owner, variable))
        return found

    def synchronized_variables(self):
        """Model and optimizer variables: their replica copies must be identical
        (metric variables are summed on read, so their copies differ)."""
        return [variable for owner, variable in self.variables() if owner != "metric"]


def first_batches(strategy, plan, seed):
    """The distributed batches of epoch 0, as `train` reads them."""
    return iter(training_input(strategy, plan, seed, epoch=0))


def run_steps(strategy, config, plan, steps, randomness=True):
    """`steps` steps of the engine `train` builds for `config`, from its first
    batches (with the model's random layers in inference mode unless `randomness`)."""
    prepare_run(config)
    probe = BatchProbe(strategy)
    engine = build_engine(config, probe, plan, plan.train.statistics())
    left_on = [] if randomness else without_randomness(engine.model)
    batches = first_batches(strategy, plan, config.seed)
    initial_weights = trainable_weights(engine.model)
    first_loss = float(engine.train(batches, tf.constant(1))[0])
    first_step_weights = trainable_weights(engine.model)
    loss = first_loss
    if steps > 1:
        rest = float(engine.train(batches, tf.constant(steps - 1))[0])
        loss = (first_loss + (steps - 1) * rest) / steps
    return ProbeRun(
        engine.model,
        engine.optimizer,
        engine.metrics,
        loss,
        first_loss,
        initial_weights,
        first_step_weights,
        probe.batch_sizes,
        left_on,
    )


def trainable_weights(model):
    return [variable.numpy() for variable in model.trainable_variables]


def in_inference_mode(layer):
    """Make `layer` run as in evaluation whatever the step asks: no dropout mask,
    noise or augmentation. Random layers draw their own numbers on each replica
    (compat.per_replica_randomness), as one device draws its own for each
    example, so N replicas and one device agree only without them. A layer whose
    call takes no `training` is left as it is."""
    call = layer.call
    if "training" not in inspect.signature(call).parameters:
        return False

    def call_for_inference(*args, **kwargs):
        kwargs["training"] = False
        return call(*args, **kwargs)

    layer.call = call_for_inference
    return True


def without_randomness(model):
    """Put the model's random layers (compat.random_layers) in inference mode;
    return the names of those left on: a layer that holds other layers (its
    batch normalization would switch to inference too, hiding a sync fault), or
    whose call takes no `training`."""
    left_on = []
    for layer in random_layers(model):
        holds_layers = any(True for _ in layer._flatten_layers(include_self=False))
        if holds_layers or not in_inference_mode(layer):
            left_on.append(layer.name)
    return left_on


def sgd_config(config):
    """The run's config with plain SGD under the float32 policy, for comparisons."""
    return dataclasses.replace(
        config,
        optimizer="sgd",
        momentum=0.0,
        learning_rate=SYNC_LEARNING_RATE,
        learning_rate_scaling="none",
        warmup_steps=0,
        lr_schedule="constant",
{%- if cookiecutter.mixed_precision != "no" %}
        mixed_precision=False,
{%- endif %}
    )


def reference_strategy():
    """One device of this machine: what N replicas must reproduce."""
    device = "/gpu:0" if tf.config.list_logical_devices("GPU") else "/cpu:0"
    return mirrored_strategy([device])


def compare_with_one_device(strategy, config, plan, steps, split_ok=True):
    """`steps` SGD steps on the strategy's replicas vs on one device, same global
    batches: after the first, the weights must agree to a small share of its
    update and the loss must agree; after all, replica copies be identical."""
    config = sgd_config(config)
    replicas = strategy.num_replicas_in_sync
    # TensorFloat-32 (on by default on Ampere and newer GPUs) rounds matmul inputs to
    # 10 bits: the same math on other batch shapes would differ by far more than 1e-5.
    tf32 = tf.config.experimental.tensor_float_32_execution_enabled()
    tf.config.experimental.enable_tensor_float_32_execution(False)
    try:
        distributed = run_steps(strategy, config, data_sharded(plan), steps, randomness=False)
        single = run_steps(
            reference_strategy(), config, on_one_device(plan), steps, randomness=False
        )
    finally:
        tf.config.experimental.enable_tensor_float_32_execution(tf32)
    # Copies of a distributed variable that differ were rounded apart by a
    # non-deterministic kernel (a few of their values' last bits), or written on
    # each replica on its own (far more). A variable created outside the scope
    # has one copy, which the variables check names.
    diverged = [
        (variable_path(variable), *copies_spread(replica_copies(strategy, variable)))
        for variable in distributed.synchronized_variables()
    ]
    diverged = [(name, spread, share) for name, spread, share in diverged if spread > 0]
    # The first step, from the same weights: float rounding leaves the two a
    # tiny share of the step's update apart, and grows through a deep network
    # step after step, while a sync fault is a large share of it from the start.
    gap = largest_difference(distributed.first_step_weights, single.first_step_weights)
    update = largest_difference(single.first_step_weights, single.initial_weights)
    relative = gap / update if update else math.inf
    ratio = distributed.first_loss / single.first_loss
    detail = (
        f"1 SGD step on {replicas} replicas vs one device: weights differ by {gap:.1e},"
        f" {relative:.1e} of the step's update {update:.1e}, loss {distributed.first_loss:.6f}"
        f" vs {single.first_loss:.6f}; replica copies {'differ' if diverged else 'identical'}"
        f" after {steps} step(s)"
    )
    left_on = distributed.random_layers_left_on
    switched = len(random_layers(distributed.model)) - len(left_on)
    if switched:
        detail += (
            f" ({switched} random layer(s) in inference mode on both sides: each replica"
            " draws its own random numbers)"
        )
    if left_on:
        detail += f"; random layer(s) left on: {', '.join(left_on)}"
    in_step = relative <= UPDATE_TOLERANCE and abs(ratio - 1) <= LOSS_TOLERANCE
    written_apart = [name for name, _, share in diverged if share > ROUNDING_SHARE]
    if in_step and written_apart:
        raise CheckFailed(
            f"{detail}; replica copies of {listed(written_apart)} differ by more than"
            f" {ROUNDING_SHARE:g} of their values, beyond float rounding: each replica writes"
            " its own copy - batch normalization with per-replica statistics"
            f" ({listed(unsynchronized_batch_norms(distributed.model)) or 'none found'}:"
            " build every one with BatchNormalization(synchronized=True)), or a layer that"
            " assigns a variable in its call (give it aggregation='mean')"
        )
    if in_step and diverged:
        raise CheckWarning(
            f"{detail}; replica copies of {listed([name for name, _, _ in diverged])} drifted"
            f" apart by up to {max(spread for _, spread, _ in diverged):.1e}: a"
            " non-deterministic kernel (an Embedding's sparse update, some GPU reductions)"
            " rounds each replica's update otherwise - a run compares and repairs the copies"
            " before every checkpoint (training/replica_sync.py); --deterministic rules the"
            " drift out"
        )
    if in_step:
        if replicas == 1:
            detail += (
                " (1 replica: nothing to compare - use several GPUs, or on a CPU"
                " CUDA_VISIBLE_DEVICES=-1 with --cpu-replicas 2)"
            )
        return detail, True
    if left_on:
        raise CheckFailed(
            f"{detail}; the random layers left on draw other numbers on {replicas} replicas"
            " than on one device - draw in layers of their own that hold no other layers"
            " and whose call takes `training` (Keras passes it), so that this check can"
            " switch them off"
        )
    cause = likely_cause(ratio, replicas, split_ok, distributed.model)
    raise CheckFailed(f"{detail}; {cause}")


def copies_spread(copies):
    """The largest difference between a variable's replica copies (0.0: equal),
    and its share of the variable's largest value."""
    first = np.asarray(copies[0], np.float64)
    spread = max(
        float(np.max(np.abs(np.asarray(copy, np.float64) - first), initial=0.0)) for copy in copies
    )
    largest = float(np.max(np.abs(first), initial=0.0))
    return spread, spread / largest if largest else math.inf


def listed(names, shown=3):
    return ", ".join(names[:shown]) + (", ..." if len(names) > shown else "")


def largest_difference(weights, others):
    return max(
        float(np.max(np.abs(left - right), initial=0.0))
        for left, right in zip(weights, others, strict=True)
    )


def data_sharded(plan):
    """The plan with DATA sharding: one device reads what all the workers read
    together only when every worker keeps every W-th record of the same order."""
    shards = data_sharding(
        len(plan.train.counts), plan.shards.num_workers, plan.shards.steps_per_pass
    )
    return dataclasses.replace(plan, shards=shards)


def on_one_device(plan):
    """The same global batches, in the same order, read whole by one device
    (which accumulates over as many micro-batches)."""
    shards = data_sharding(len(plan.train.counts), 1, plan.shards.steps_per_pass)
    return dataclasses.replace(
        plan, per_replica_batch_size=plan.evaluation_batch_size, replicas=1, shards=shards
    )


def likely_cause(loss_ratio, replicas, split_ok, model):
    """Name the usual mistake behind a mismatch, from its signature."""
    # Per-replica statistics also leave the replicas' moving averages apart.
    batch_norms = unsynchronized_batch_norms(model)
    if replicas > 1 and batch_norms:
        named = ", ".join(batch_norms[:3]) + (", ..." if len(batch_norms) > 3 else "")
        return (
            f"{len(batch_norms)} of the model's BatchNormalization layers ({named}) compute"
            " their statistics over each replica's share of the batch, not the global batch"
            " - build every one with BatchNormalization(synchronized=True) (a model you did"
            " not write, such as a keras.applications backbone: see docs/your-model.md,"
            " 'Batch normalization')"
        )
    if replicas > 1 and abs(loss_ratio * replicas - 1) < 0.01:
        return (
            f"the loss is 1/{replicas} of one device's: it is reduced with MEAN across"
            " replicas - reduce with tf.distribute.ReduceOp.SUM (each replica's loss is"
            " already divided by the global batch)"
        )
    if replicas > 1 and abs(loss_ratio / replicas - 1) < 0.1:
        if not split_ok:
            return (
                f"every replica trains on the whole global batch, so gradients are"
                f" {replicas}x too large: the dataset is not distributed - build it"
                " with strategy.distribute_datasets_from_function() (data.training_input)"
            )
        return (
            f"gradients are {replicas}x too large: the loss is averaged over the local"
            " batch, not scaled by the global batch - use tf.nn.compute_average_loss("
            "per_example_loss, global_batch_size=GLOBAL_BATCH) and reduce with SUM"
        )
    return (
        "the replicas do not compute what one device computes, and the difference has"
        " the signature of none of the usual causes (the loss's scaling or reduction,"
        " a dataset not distributed, per-replica batch normalization, variables outside"
        " the scope) - compare your step with training/engine_custom.py's, which passes"
    )
