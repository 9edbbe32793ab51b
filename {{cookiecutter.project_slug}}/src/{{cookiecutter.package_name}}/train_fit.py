"""Training with Keras `model.fit` under the strategy."""

import logging
{% if cookiecutter.keras_package == "keras3" %}
import keras
{%- else %}
import tf_keras as keras
{%- endif %}

from {{ cookiecutter.package_name }}.data import batches_for_epochs, evaluation_batches
from {{ cookiecutter.package_name }}.model import build_model, make_optimizer
from {{ cookiecutter.package_name }}.training import (
    METRIC_NAME,
    Progress,
{%- if cookiecutter.keras_package == "keras3" %}
    TrainingError,
{%- endif %}
    TrainingResult,
    check_finite,
    fingerprint,
    log_epoch,
{%- if cookiecutter.distribution == "multi_worker" %}
    remove_worker_dir,
{%- endif %}
    restore_latest,
{%- if cookiecutter.distribution == "multi_worker" %}
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
        # Built here, under the scope, so its slots are mirrored and a checkpoint
        # restores them before the first step.
        model.optimizer.build(model.trainable_variables)
    return model


class LossWatch(keras.callbacks.Callback):
    """Logs every epoch, and stops at the first NaN or Inf loss, naming the step,
    before the epoch's checkpoint is written."""

    def __init__(self, epochs):
        super().__init__()
        self.epochs = epochs
        self.epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        check_finite(float(logs["loss"]), self.epoch, batch + 1)

    def on_epoch_end(self, epoch, logs=None):
        log_epoch(epoch, self.epochs, logs["loss"], logs[METRIC_NAME])


class EpochCheckpoint(keras.callbacks.Callback):
    """Saves the model, the optimizer and the progress after every epoch."""

    def __init__(self, manager, progress):
        super().__init__()
        self.manager = manager
        self.progress = progress

    def on_epoch_end(self, epoch, logs=None):
        self.progress.epoch_done(epoch, float(logs["loss"]))
        self.manager.save()


def train_with_fit(config, strategy, plan, model_dir):
{%- if cookiecutter.distribution == "multi_worker" %}
    write_dir = worker_dir(model_dir, strategy)
{%- else %}
    write_dir = model_dir
{%- endif %}
    model = build_compiled_model(strategy, config)
    progress = Progress(strategy)
    checkpoint = progress.checkpoint(model, model.optimizer)
    manager = restore_latest(checkpoint, progress, model_dir, write_dir)
    first_epoch = progress.first_epoch
    # A plain dataset batched with the global batch: fit splits every batch across
    # the replicas itself. Each epoch's order depends only on the seed and the epoch.
    train_batches = batches_for_epochs(
        plan.train_examples,
        plan.global_batch_size,
        seed=config.seed,
        steps_per_epoch=plan.steps_per_epoch,
        epochs=range(first_epoch, config.epochs),
        repeat=plan.repeat,
    )
    eval_batches = evaluation_batches(plan.eval_examples, plan.global_batch_size)
    history = {}
    # A run killed after its last epoch's checkpoint has nothing left to train (fit
    # would still reach for a first batch of the empty dataset).
    if first_epoch < config.epochs:
        history = model.fit(
            train_batches,
            initial_epoch=first_epoch,
            epochs=config.epochs,
            steps_per_epoch=plan.steps_per_epoch,
            validation_data=eval_batches,
            callbacks=[
                # First: a NaN epoch is stopped before the checkpoint callback saves it.
                LossWatch(config.epochs),
                EpochCheckpoint(manager, progress),
                keras.callbacks.TensorBoard(str(write_dir / "logs")),
            ],
            verbose=2,
        ).history
    losses = [float(loss) for loss in history.get("loss", [])]
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
        final_loss=progress.final_loss,
        final_metric=float(history[METRIC_NAME][-1]) if losses else None,
        eval_loss=float(eval_loss),
        eval_metric=float(eval_metric),
        weights_path=str(weights_path),
        weights_fingerprint=fingerprint(model.get_weights()),
    )
