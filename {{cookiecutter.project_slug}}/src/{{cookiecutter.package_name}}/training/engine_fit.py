"""The fit engine: the model Keras compiles, and the training step `model.fit` runs.

`compile()` sets the loss, the metrics and the optimizer{% if cookiecutter.mixed_precision == "float16" %} (wrapped in the
LossScaleOptimizer of distribute/compat.py under mixed_float16){% endif %}, and `model.train_step` is the step
`fit` would run (override it in your model to change training). The engine
runs that step under `strategy.run`, k steps per tf.function call, and the
controller does the rest. `model.fit` itself cannot resume in the middle of
an epoch: its data iterator restarts at batch 0 (see docs/training.md).

With --accumulate-steps k, train_step runs on each of k micro-batches with the
optimizer's update held back, and the mean of the gradients it computed is
applied once (training/accumulation.py): an overridden train_step is accumulated too,
as long as it updates through `self.optimizer` (apply_gradients or minimize).
"""

import contextlib
import functools
import threading

import tensorflow as tf

from {{ cookiecutter.package_name }}.distribute.compat import (
    clip_after_the_all_reduce,
    metric_results,
    per_replica_randomness,
)
from {{ cookiecutter.package_name }}.task import METRIC_NAME, build_model, per_example_loss
from {{ cookiecutter.package_name }}.training.accumulation import accumulate
from {{ cookiecutter.package_name }}.training.evaluation import make_metric
from {{ cookiecutter.package_name }}.training.optimizer import make_optimizer


def build_compiled_model(strategy, config, statistics, learning_rate):
    """Model (built with the training data's `statistics`), optimizer (on
    `learning_rate`, a schedule) and metrics, all created under the strategy's scope."""
    with strategy.scope():
        model = build_model(statistics)
        per_replica_randomness(model)  # dropout masks of their own on each replica
        optimizer = make_optimizer(config, learning_rate, model)
        if config.clip_norm is not None:
            clip_after_the_all_reduce(optimizer, config.clip_norm)
        model.compile(
            optimizer=optimizer,
            loss=per_example_loss,  # Keras averages it over the global batch
            metrics=[make_metric()],
        )
        # Built here, under the scope, so its slots are mirrored and a checkpoint
        # restores them before the first step.
        model.optimizer.build(model.trainable_variables)
    return model


class HeldBackUpdate:
    """train_step's optimizer update, held back so that the engine can
    accumulate: while `holding()` (around the trace of the step function),
    apply_gradients records the gradients it is handed in place of the update.
    Recorded per thread: MirroredStrategy traces each replica's step in a thread
    of its own."""

    def __init__(self, optimizer):
        self.optimizer = optimizer
        self.apply_gradients = optimizer.apply_gradients  # the update itself
        self.handed = {}

    def record(self, grads_and_vars, *args, **kwargs):
        self.handed[threading.get_ident()] = {id(var): grad for grad, var in grads_and_vars}

    @contextlib.contextmanager
    def holding(self):
        self.optimizer.apply_gradients = self.record  # the instance's, over its class's
        try:
            yield
        finally:
            del self.optimizer.apply_gradients

    def gradients(self, model, data):
        """(0, the gradients of model.trainable_variables that
        model.train_step(data) hands the optimizer); its metrics are updated."""
        model.train_step(data)
        handed = self.handed.pop(threading.get_ident())
        return tf.constant(0.0), [handed.get(id(var)) for var in model.trainable_variables]


def accumulated_train_step(model, held_back, accumulate_steps, data):
    """One update from train_step on `accumulate_steps` micro-batches of `data`:
    each micro-batch's loss is its mean, so the update is the gradients' mean."""
    micro_step = functools.partial(held_back.gradients, model)
    _, gradients = accumulate(micro_step, data, accumulate_steps)
    mean = [None if gradient is None else gradient / accumulate_steps for gradient in gradients]
    held_back.apply_gradients(zip(mean, model.trainable_variables, strict=True))


def make_train_function(strategy, model, accumulate_steps=1):
    """A tf.function running `num_steps` of the model's own train_step on the
    replicas (accumulated over `accumulate_steps` micro-batches); returns their
    mean loss and training metric, which accumulate in the model's metrics.
    They are read and reset inside the function (eager
    reads of replicated variables cost more than a small model's step), after
    the steps: compile() builds its metrics in the first train_step, so a reset
    traced before it would miss them."""
    if accumulate_steps == 1:
        step, holding = model.train_step, contextlib.nullcontext
    else:
        held_back = HeldBackUpdate(model.optimizer)
        step = functools.partial(accumulated_train_step, model, held_back, accumulate_steps)
        holding = held_back.holding

    @tf.function
    def train_steps(iterator, num_steps):
        with holding():
            for _ in tf.range(num_steps):
                # train_step scales the loss for the replicas and lets the optimizer
                # all-reduce (SUM) the gradients, as in fit.
                strategy.run(step, args=(next(iterator),))
        results = metric_results(model)
        model.reset_metrics()  # runs after the reads above (tf.function keeps their order)
        return results["loss"], results[METRIC_NAME]

    return train_steps


class FitEngine:
    name = "fit"

    def __init__(self, strategy, model, accumulate_steps=1):
        self.model = model
        self.optimizer = model.optimizer
        self.train_steps = make_train_function(strategy, model, accumulate_steps)

    @property
    def metrics(self):
        # compile() builds its metrics in the first train_step: read them late.
        return self.model.metrics

    def train(self, iterator, num_steps):
        """Run the next `num_steps` steps; return their mean loss and metric."""
        return self.train_steps(iterator, num_steps)
