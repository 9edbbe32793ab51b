"""The fit engine: the model Keras compiles, and the training step `model.fit` runs.

`compile()` sets the loss, the metrics and the optimizer{% if cookiecutter.mixed_precision == "float16" %} (wrapped in the
LossScaleOptimizer of compat.py under mixed_float16){% endif %}, and `model.train_step` is the step
`fit` would run (override it in your model to change training). The engine
runs that step under `strategy.run`, k steps per tf.function call, and the
controller does the rest. `model.fit` itself cannot resume in the middle of
an epoch: its data iterator restarts at batch 0 (see the README).
"""

import tensorflow as tf

from {{ cookiecutter.package_name }}.compat import (
    clip_after_the_all_reduce,
    metric_results,
    per_replica_randomness,
)
from {{ cookiecutter.package_name }}.evaluation import make_metric
from {{ cookiecutter.package_name }}.optimizer import make_optimizer
from {{ cookiecutter.package_name }}.task import METRIC_NAME, build_model, per_example_loss


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


def make_train_function(strategy, model):
    """A tf.function running `num_steps` of the model's own train_step on the
    replicas; returns their mean loss and training metric, which accumulate in
    the model's metrics. They are read and reset inside the function (eager
    reads of replicated variables cost more than a small model's step), after
    the steps: compile() builds its metrics in the first train_step, so a reset
    traced before it would miss them."""

    @tf.function
    def train_steps(iterator, num_steps):
        for _ in tf.range(num_steps):
            # train_step scales the loss for the replicas and lets the optimizer
            # all-reduce (SUM) the gradients, as in fit.
            strategy.run(model.train_step, args=(next(iterator),))
        results = metric_results(model)
        model.reset_metrics()  # runs after the reads above (tf.function keeps their order)
        return results["loss"], results[METRIC_NAME]

    return train_steps


class FitEngine:
    name = "fit"

    def __init__(self, strategy, model):
        self.model = model
        self.optimizer = model.optimizer
        self.train_steps = make_train_function(strategy, model)

    @property
    def metrics(self):
        # compile() builds its metrics in the first train_step: read them late.
        return self.model.metrics

    def train(self, iterator, num_steps):
        """Run the next `num_steps` steps; return their mean loss and metric."""
        return self.train_steps(iterator, num_steps)
