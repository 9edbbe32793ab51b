"""Training with Keras `model.fit` under the strategy."""

import logging

{%- if cookiecutter.keras_package == "keras3" %}

import keras
{%- else %}

import tf_keras as keras
{%- endif %}

from {{ cookiecutter.package_name }}.data import evaluation_batches, training_batches
from {{ cookiecutter.package_name }}.model import build_model, make_optimizer
from {{ cookiecutter.package_name }}.training import (
    METRIC_NAME,
{%- if cookiecutter.keras_package == "keras3" %}
    TrainingError,
{%- endif %}
    TrainingResult,
    check_finite,
    fingerprint,
    log_epoch,
{%- if cookiecutter.distribution == "multi_worker" %}
    remove_worker_dir,
    worker_dir,
{%- endif %}
)

log = logging.getLogger(__name__)
{%- if cookiecutter.keras_package == "keras3" %}


def check_steps_per_execution(steps_per_execution, num_replicas):
    if steps_per_execution > 1 and num_replicas > 1:
        raise TrainingError(
            f"steps_per_execution={steps_per_execution} fails in Keras 3 with"
            f" {num_replicas} replicas (https://github.com/keras-team/keras/issues/19246)"
            " - use steps_per_execution=1, or the custom loop's --steps-per-call"
        )
{%- endif %}


def build_compiled_model(strategy, config):
    """Model, optimizer and metrics, all created under the strategy's scope."""
{%- if cookiecutter.keras_package == "keras3" %}
    check_steps_per_execution(config.steps_per_execution, strategy.num_replicas_in_sync)
{%- endif %}
    with strategy.scope():
        model = build_model()
        model.compile(
            optimizer=make_optimizer(config.optimizer, config.learning_rate),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=[keras.metrics.SparseCategoricalAccuracy(name=METRIC_NAME)],
            steps_per_execution=config.steps_per_execution,
        )
    return model


class EpochLog(keras.callbacks.Callback):
    """One log line per epoch, and a clear error when the loss stops being finite."""

    def __init__(self, epochs):
        super().__init__()
        self.epochs = epochs

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        check_finite(float(logs["loss"]), epoch, "the end of the epoch")
        log_epoch(epoch, self.epochs, logs["loss"], logs[METRIC_NAME])


def train_with_fit(config, strategy, plan, model_dir):
{%- if cookiecutter.distribution == "multi_worker" %}
    write_dir = worker_dir(model_dir, strategy)
{%- else %}
    write_dir = model_dir
{%- endif %}
    model = build_compiled_model(strategy, config)
    # A plain dataset batched with the global batch: fit splits every batch
    # across the replicas itself.
    train_batches = training_batches(
        plan.train_examples, plan.global_batch_size, seed=config.seed, repeat=plan.repeat
    )
    eval_batches = evaluation_batches(plan.eval_examples, plan.global_batch_size)
    callbacks = [
        # EpochLog first: it stops a NaN epoch before BackupAndRestore saves it.
        EpochLog(config.epochs),
        keras.callbacks.TerminateOnNaN(),
{%- if cookiecutter.distribution == "multi_worker" %}
        # The same directory on every worker: the callback itself keeps only the
        # chief's copy, and every worker restores it.
        keras.callbacks.BackupAndRestore(str(model_dir / "backup")),
{%- else %}
        keras.callbacks.BackupAndRestore(str(write_dir / "backup")),
{%- endif %}
        keras.callbacks.TensorBoard(str(write_dir / "logs")),
    ]
    history = model.fit(
        train_batches,
        epochs=config.epochs,
        # None: one pass over the finite data per epoch.
        steps_per_epoch=plan.steps_per_epoch if plan.repeat else None,
        validation_data=eval_batches,
        callbacks=callbacks,
        verbose=2,
    )
    losses = [float(loss) for loss in history.history["loss"]]
    if model.stop_training and losses:
        check_finite(losses[-1], len(losses) - 1, "the end of the epoch")
    eval_loss, eval_metric = model.evaluate(eval_batches, verbose=0)
    weights_path = write_dir / "final.weights.h5"
    model.save_weights(str(weights_path))
    model.save(str(write_dir / "model.keras"))
{%- if cookiecutter.distribution == "multi_worker" %}
    remove_worker_dir(write_dir, model_dir)
    weights_path = model_dir / "final.weights.h5"
{%- endif %}
    return TrainingResult(
        losses=losses,
        final_metric=float(history.history[METRIC_NAME][-1]),
        eval_loss=float(eval_loss),
        eval_metric=float(eval_metric),
        weights_path=str(weights_path),
        weights_fingerprint=fingerprint(model.get_weights()),
    )
