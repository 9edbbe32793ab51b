"""The custom training loop: `strategy.run` on a replica step, written out in full.

The loss of each replica is scaled by the GLOBAL batch size and the replicas'
losses are summed, so N replicas compute exactly what one device would on the
same global batch.
"""

import dataclasses
import logging
{% if cookiecutter.keras_package == "keras3" %}
import keras
import tensorflow as tf
{%- else %}
import tensorflow as tf
import tf_keras as keras
{%- endif %}

from {{ cookiecutter.package_name }}.data import evaluation_batches, training_batches
from {{ cookiecutter.package_name }}.model import build_model, make_optimizer
from {{ cookiecutter.package_name }}.training import (
    METRIC_NAME,
    Progress,
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

SUM = tf.distribute.ReduceOp.SUM


@dataclasses.dataclass
class TrainingState:
    """Everything with variables: created together under the strategy's scope."""

    model: keras.Model
    optimizer: keras.optimizers.Optimizer
    metric: keras.metrics.Metric
    progress: Progress
    checkpoint: tf.train.Checkpoint


def build_training_state(strategy, config):
    with strategy.scope():
        model = build_model()
        optimizer = make_optimizer(config.optimizer, config.learning_rate)
{%- if cookiecutter.mixed_precision == "yes" %}
        if config.mixed_precision:
{%- if cookiecutter.keras_package == "keras3" %}
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
{%- else %}
            optimizer = keras.mixed_precision.LossScaleOptimizer(optimizer)
{%- endif %}
{%- endif %}
        # Built here, not lazily in the first step: slots created outside the
        # scope would be plain, unsynchronised variables.
        optimizer.build(model.trainable_variables)
        metric = keras.metrics.SparseCategoricalAccuracy(name=METRIC_NAME)
    progress = Progress(strategy)
    checkpoint = progress.checkpoint(model, optimizer)
    return TrainingState(model, optimizer, metric, progress, checkpoint)


def per_example_loss(labels, logits):
    # In float32 whatever the compute dtype: float16 loses the softmax's precision.
    logits = tf.cast(logits, tf.float32)
    return keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)


def replica_loss(model, labels, logits, global_batch_size):
    """This replica's share of the global-batch loss: summed over replicas it is
    the mean loss over the global batch, plus the regularization once."""
    loss = tf.nn.compute_average_loss(
        per_example_loss(labels, logits), global_batch_size=global_batch_size
    )
    if model.losses:
        loss += tf.nn.scale_regularization_loss(tf.add_n(model.losses))
    return loss


def distributed_batches(strategy, plan, seed):
    """An iterator of global batches, each split across the replicas: every
    replica's step receives global_batch_size // replicas examples."""
    batches = training_batches(
        plan.train_examples, plan.global_batch_size, seed=seed, repeat=plan.repeat
    )
    return iter(strategy.experimental_distribute_dataset(batches))


def make_train_function(strategy, state, global_batch_size):
    """A tf.function running `num_steps` training steps; returns their summed loss."""
    model, optimizer = state.model, state.optimizer
{%- if cookiecutter.mixed_precision == "yes" %}
{%- if cookiecutter.keras_package == "keras3" %}
    loss_scaling = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
{%- else %}
    loss_scaling = isinstance(optimizer, keras.mixed_precision.LossScaleOptimizer)
{%- endif %}
{%- endif %}

    def replica_step(features, labels):
        with tf.GradientTape() as tape:
            logits = model(features, training=True)
            loss = replica_loss(model, labels, logits, global_batch_size)
{%- if cookiecutter.mixed_precision == "yes" %}
            if loss_scaling:
                # float16 gradients underflow without it; the optimizer unscales.
{%- if cookiecutter.keras_package == "keras3" %}
                loss_to_differentiate = optimizer.scale_loss(loss)
{%- else %}
                loss_to_differentiate = optimizer.get_scaled_loss(loss)
{%- endif %}
            else:
                loss_to_differentiate = loss
        gradients = tape.gradient(loss_to_differentiate, model.trainable_variables)
{%- if cookiecutter.keras_package == "tf_keras" %}
        if loss_scaling:
            gradients = optimizer.get_unscaled_gradients(gradients)
{%- endif %}
{%- else %}
        gradients = tape.gradient(loss, model.trainable_variables)
{%- endif %}
        # Inside the replica function: the optimizer all-reduces (SUMs) the
        # gradients across replicas before applying them.
        optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
        state.metric.update_state(labels, logits)
        return loss

    @tf.function
    def train_steps(iterator, num_steps):
        total = tf.constant(0.0)
        for _ in tf.range(num_steps):
            features, labels = next(iterator)
            per_replica_loss = strategy.run(replica_step, args=(features, labels))
            # Reduced inside the loop: a PerReplica value cannot leave a tf.range loop.
            total += strategy.reduce(SUM, per_replica_loss, axis=None)
        return total

    return train_steps


def make_eval_function(strategy, model):
    """A tf.function returning the summed loss, correct count and example count of
    one global batch: exact means over the evaluated examples, however they are
    split across replicas."""

    def replica_eval(features, labels):
        logits = model(features, training=False)
        predictions = tf.argmax(logits, axis=-1, output_type=labels.dtype)
        correct = tf.cast(tf.equal(predictions, labels), tf.float32)
        count = tf.cast(tf.size(labels), tf.float32)
        return tf.reduce_sum(per_example_loss(labels, logits)), tf.reduce_sum(correct), count

    @tf.function
    def eval_step(features, labels):
        sums = strategy.run(replica_eval, args=(features, labels))
        return [strategy.reduce(SUM, value, axis=None) for value in sums]

    return eval_step


def evaluate(strategy, model, plan):
    eval_step = make_eval_function(strategy, model)
    batches = evaluation_batches(plan.eval_examples, plan.global_batch_size)
    loss_sum = correct = count = 0.0
    for features, labels in strategy.experimental_distribute_dataset(batches):
        batch_loss, batch_correct, batch_count = eval_step(features, labels)
        loss_sum += float(batch_loss)
        correct += float(batch_correct)
        count += float(batch_count)
    return loss_sum / count, correct / count


def train_with_custom_loop(config, strategy, plan, model_dir):
{%- if cookiecutter.distribution == "multi_worker" %}
    write_dir = worker_dir(model_dir, strategy)
{%- else %}
    write_dir = model_dir
{%- endif %}
    state = build_training_state(strategy, config)
    manager = restore_latest(state.checkpoint, state.progress, model_dir, write_dir)
    train_steps = make_train_function(strategy, state, plan.global_batch_size)
    writer = tf.summary.create_file_writer(str(write_dir / "logs"))
    steps = plan.steps_per_epoch
    losses = []
    for epoch in range(state.progress.first_epoch, config.epochs):
        # The data order depends only on the seed and the epoch.
        iterator = distributed_batches(strategy, plan, seed=config.seed + epoch)
        progress = keras.utils.Progbar(steps, stateful_metrics=["loss"])
        state.metric.reset_state()
        loss_sum, done = 0.0, 0
        while done < steps:
            # The last call of an epoch runs the remaining steps_per_epoch % N steps;
            # a tensor argument keeps it from retracing.
            num_steps = min(config.steps_per_call, steps - done)
            loss_sum += float(train_steps(iterator, tf.constant(num_steps)))
            done += num_steps
            check_finite(loss_sum, epoch, done)
            progress.update(done, [("loss", loss_sum / done)])
        epoch_loss = loss_sum / steps
        losses.append(epoch_loss)
        metric = float(state.metric.result())
        log_epoch(epoch, config.epochs, epoch_loss, metric)
        with writer.as_default(step=epoch):
            tf.summary.scalar("loss", epoch_loss)
            tf.summary.scalar(METRIC_NAME, metric)
        state.progress.epoch_done(epoch, epoch_loss)
        manager.save()
    eval_loss, eval_metric = evaluate(strategy, state.model, plan)
    weights_path = write_dir / "final.weights.h5"
    state.model.save_weights(str(weights_path))
    state.model.save(str(write_dir / "model.keras"))
{%- if cookiecutter.distribution == "multi_worker" %}
    remove_worker_dir(write_dir, model_dir)
    weights_path = model_dir / "final.weights.h5"
{%- endif %}
    return TrainingResult(
        losses=losses,
        final_loss=state.progress.final_loss,
        final_metric=float(state.metric.result()) if losses else None,
        eval_loss=eval_loss,
        eval_metric=eval_metric,
        weights_path=str(weights_path),
        weights_fingerprint=fingerprint(state.model.get_weights()),
    )
