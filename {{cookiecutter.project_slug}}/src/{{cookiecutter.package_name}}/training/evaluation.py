"""Exact evaluation, the same for both engines, and the task's metric as
training reports it.

Every evaluation example counts once: the batches keep their short remainder,
each replica returns the sums of its share (an empty share runs the model on a
blank example that adds nothing), and the sums are added across replicas and
batches inside one tf.function before the division. `eval_loss` is the mean of
task.per_example_loss over the examples, without the regularization term that
the training loss includes; the metric is the mean of task.per_example_metric,
as in training.
"""

import tensorflow as tf

from {{ cookiecutter.package_name }}.data.record_format import LABEL_SHAPE
from {{ cookiecutter.package_name }}.distribute.compat import keras
from {{ cookiecutter.package_name }}.task import METRIC_NAME, per_example_loss, per_example_metric

SUM = tf.distribute.ReduceOp.SUM


def make_metric():
    """The training metric: the running mean of task.per_example_metric."""

    def metric(labels, logits):
        # tf_keras's compile() hands a label of shape [] over as [batch, 1].
        return per_example_metric(tf.reshape(labels, [-1, *LABEL_SHAPE]), logits)

    return keras.metrics.MeanMetricWrapper(metric, name=METRIC_NAME)


def make_evaluate_function(strategy, model):
    """A tf.function: distributed evaluation batches -> (loss, metric)."""

    def replica_sums(features, labels):
        count = tf.shape(labels)[0]
        if all(isinstance(part, tf.Tensor) for part in tf.nest.flatten(features)):
            # An empty share (of the last batch, or of a worker whose files ran
            # out) runs the model too, on one blank example that counts for
            # nothing: every replica runs the same ops, so a model with a
            # collective in inference neither hangs nor fails to trace.
            # Convolutions reject an empty batch.
            features, labels = tf.cond(
                count > 0,
                lambda: (features, labels),
                lambda: tf.nest.map_structure(blank_example, (features, labels)),
            )
            return example_sums(features, labels, count)
        # Ragged or sparse inputs have no blank: an empty share skips the model.
        return tf.cond(
            count > 0,
            lambda: example_sums(features, labels, count),
            lambda: tf.zeros([3], tf.float64),
        )

    def example_sums(features, labels, count):
        logits = model(features, training=False)

        def total(per_example):
            # float64: float32 would lose examples' worth of precision on large
            # sets. A blank example is alone in its batch and adds nothing (its
            # values may be NaN: tf.where, not a product).
            summed = tf.reduce_sum(tf.cast(per_example, tf.float64))
            return tf.where(count > 0, summed, tf.constant(0.0, tf.float64))

        return tf.stack(
            [
                total(per_example_loss(labels, logits)),
                total(per_example_metric(labels, logits)),
                tf.cast(count, tf.float64),
            ]
        )

    @tf.function
    def evaluate(batches):
        totals = tf.zeros([3], tf.float64)
        for features, labels in batches:
            sums = strategy.run(replica_sums, args=(features, labels))
            totals += strategy.reduce(SUM, sums, axis=None)
        return totals[0] / totals[2], totals[1] / totals[2]

    return evaluate


def blank_example(tensor):
    """One example of `tensor`'s dtype, zeros or empty strings, its inner sizes
    those of the batch (at least 1); known ones stay known to the model."""
    shape = tf.concat([[1], tf.maximum(tf.shape(tensor)[1:], 1)], axis=0)
    blank = tf.zeros(shape, tensor.dtype)
    blank.set_shape([1, *(size or None for size in tensor.shape[1:])])
    return blank


def make_evaluator(strategy, model, batches):
    """() -> (mean loss, mean metric) of `model` over every example of `batches`
    (distributed: data.evaluation_input): traced once, run at every epoch end."""
    evaluate_batches = make_evaluate_function(strategy, model)

    def evaluate():
        loss, metric = evaluate_batches(batches)
        return float(loss), float(metric)

    return evaluate


def evaluate(strategy, model, batches):
    """One evaluation of `model` over `batches` (see make_evaluator)."""
    return make_evaluator(strategy, model, batches)()
