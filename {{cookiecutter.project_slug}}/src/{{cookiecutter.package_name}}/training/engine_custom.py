"""The custom engine: `strategy.run` on a replica step, written out in full.

The loss of each replica is scaled by the GLOBAL batch size and the replicas'
losses are summed, so N replicas compute exactly what one device would on the
same global batch (with --accumulate-steps, on the update's global batch).
"""

import dataclasses
import logging

import tensorflow as tf

from {{ cookiecutter.package_name }} import TrainerError
{%- if cookiecutter.mixed_precision == "float16" %}
from {{ cookiecutter.package_name }}.distribute.compat import (
    apply_summed_gradients,
    is_loss_scale_optimizer,
    keras,
    per_replica_randomness,
    scale_loss,
    unscale_gradients,
)
{%- else %}
from {{ cookiecutter.package_name }}.distribute.compat import (
    apply_summed_gradients,
    keras,
    per_replica_randomness,
)
{%- endif %}
from {{ cookiecutter.package_name }}.task import build_model, per_example_loss
from {{ cookiecutter.package_name }}.training.accumulation import accumulate
from {{ cookiecutter.package_name }}.training.evaluation import make_metric
from {{ cookiecutter.package_name }}.training.optimizer import make_optimizer

log = logging.getLogger(__name__)

SUM = tf.distribute.ReduceOp.SUM


@dataclasses.dataclass
class TrainingState:
    """Everything with variables: created together under the strategy's scope."""

    model: keras.Model
    optimizer: keras.optimizers.Optimizer
    metric: keras.metrics.Metric


def build_training_state(strategy, config, statistics, learning_rate):
    """Model (built with the training data's `statistics`), optimizer (on
    `learning_rate`, a schedule) and metric, under the strategy's scope."""
    with strategy.scope():
        model = build_model(statistics)
        per_replica_randomness(model)  # dropout masks of their own on each replica
        optimizer = make_optimizer(config, learning_rate, model)
        # Built here, not lazily in the first step: slots created outside the
        # scope would be plain, unsynchronised variables.
        optimizer.build(model.trainable_variables)
        metric = make_metric()
    return TrainingState(model, optimizer, metric)


def replica_loss(model, labels, logits, global_batch_size, accumulate_steps=1):
    """This replica's share of the global-batch loss: summed over replicas (and
    over an update's `accumulate_steps` micro-batches) it is the mean loss over
    the global batch, plus the regularization once."""
    loss = tf.nn.compute_average_loss(
        per_example_loss(labels, logits), global_batch_size=global_batch_size
    )
    if model.losses:
        regularization = tf.nn.scale_regularization_loss(tf.add_n(model.losses))
        loss += regularization / accumulate_steps
    return loss


def make_train_function(
    strategy, state, global_batch_size, jit_compile=False, clip_norm=None, accumulate_steps=1
):
    """A tf.function running `num_steps` training steps; returns their mean loss
    and training metric. The metric is reset and read inside the function: eager
    reads of replicated variables cost more than a small model's step. With
    `clip_norm`, the all-reduced gradient is clipped to that global norm; with
    `accumulate_steps` k, a step sums the gradients of k micro-batches
    (training/accumulation.py) and updates once."""
    model, optimizer = state.model, state.optimizer
{%- if cookiecutter.mixed_precision == "float16" %}
    loss_scaling = is_loss_scale_optimizer(optimizer)
{%- endif %}

    def replica_gradients(features, labels):
        """This replica's loss, logits and gradients, not yet all-reduced."""
        with tf.GradientTape() as tape:
            logits = model(features, training=True)
            loss = replica_loss(model, labels, logits, global_batch_size, accumulate_steps)
{%- if cookiecutter.mixed_precision == "float16" %}
            # float16 gradients underflow without loss scaling.
            scaled = scale_loss(optimizer, loss) if loss_scaling else loss
        gradients = tape.gradient(scaled, model.trainable_variables)
        if loss_scaling:
            gradients = unscale_gradients(optimizer, gradients)
{%- else %}
        gradients = tape.gradient(loss, model.trainable_variables)
{%- endif %}
        return loss, logits, gradients

    if jit_compile:
        # XLA compiles the forward and backward pass on each replica; the
        # all-reduce in apply_gradients stays outside (a nested tf.function
        # cannot hold a cross-replica merge).
        check_compilable(model)
        replica_gradients = tf.function(replica_gradients, jit_compile=True)
        log.info("XLA: each replica's forward and backward pass is compiled")

    def micro_step(batch):
        features, labels = batch
        loss, logits, gradients = replica_gradients(features, labels)
        state.metric.update_state(labels, logits)
        return loss, gradients

    def replica_step(features, labels):
        loss, gradients = accumulate(micro_step, (features, labels), accumulate_steps)
        variables = model.trainable_variables
        if clip_norm is None:
            # Inside the replica function: the optimizer all-reduces (SUMs) the
            # gradients across replicas before applying them.
            optimizer.apply_gradients(zip(gradients, variables, strict=True))
        else:
            # Clipped once summed: clipping each replica's share (what an
            # optimizer's clipnorm does in Keras 3) would not give one device's
            # result. Summed here, so the optimizer must not sum them again.
            summed = tf.distribute.get_replica_context().all_reduce(SUM, gradients)
            clipped, _ = tf.clip_by_global_norm(summed, clip_norm)
            apply_summed_gradients(optimizer, zip(clipped, variables, strict=True))
        return loss

    @tf.function
    def train_steps(iterator, num_steps):
        state.metric.reset_state()
        total = tf.constant(0.0)
        for _ in tf.range(num_steps):
            features, labels = next(iterator)
            per_replica_loss = strategy.run(replica_step, args=(features, labels))
            # Reduced inside the loop: a PerReplica value cannot leave a tf.range loop.
            total += strategy.reduce(SUM, per_replica_loss, axis=None)
        return total / tf.cast(num_steps, total.dtype), state.metric.result()

    return train_steps


def check_compilable(model):
    """Refuse --jit-compile for a model XLA cannot compile: one with string
    inputs (XLA has no string kernels), or with layers that all-reduce inside the
    replica step: the compiled pass is a nested tf.function, where TensorFlow
    fails with "`merge_call` called while defining a new graph"."""
    synchronized = [
        layer.name
        for layer in model._flatten_layers()
        if isinstance(layer, keras.layers.BatchNormalization) and layer.synchronized
    ]
    if synchronized:
        raise TrainerError(
            f"--jit-compile cannot compile the replica step of this model: its"
            f" BatchNormalization(synchronized=True) layers ({', '.join(synchronized[:3])}"
            f"{', ...' if len(synchronized) > 3 else ''}) all-reduce inside it - leave out"
            " --jit-compile"
        )
    strings = [tensor.name for tensor in model.inputs if tf.as_dtype(tensor.dtype) == tf.string]
    if strings:
        raise TrainerError(
            f"--jit-compile cannot compile the replica step of this model: its inputs"
            f" {', '.join(strings)} are strings, which XLA has no kernels for - leave out"
            " --jit-compile, or turn them into numbers in task.prepare_batch"
        )


class CustomEngine:
    name = "custom"

    def __init__(self, strategy, state, plan, config):
        """Trains `state` on `plan`'s global batch, as `config` asks (XLA,
        clipping, accumulation)."""
        self.model = state.model
        self.optimizer = state.optimizer
        self.metrics = [state.metric]
        self.train_steps = make_train_function(
            strategy,
            state,
            plan.global_batch_size,
            config.jit_compile,
            config.clip_norm,
            plan.accumulate_steps,
        )

    def train(self, iterator, num_steps):
        """Run the next `num_steps` steps; return their mean loss and metric."""
        return self.train_steps(iterator, num_steps)
