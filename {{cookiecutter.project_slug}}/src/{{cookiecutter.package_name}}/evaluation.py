"""Exact evaluation, the same for both engines, and the task's metric as
training reports it.

Every evaluation example counts once: the batches keep their short remainder,
each replica returns the sums of its share (an empty share adds zeros), and the
sums are added across replicas and batches inside one tf.function before the
division. `eval_loss` is the mean of task.per_example_loss over the examples,
without the regularization term that the training loss includes; the metric
is the mean of task.per_example_metric, as in training.
"""

import tensorflow as tf

from {{ cookiecutter.package_name }}.compat import keras
from {{ cookiecutter.package_name }}.task import (
    LABEL_SHAPE,
    METRIC_NAME,
    per_example_loss,
    per_example_metric,
)

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
        # An empty share of the last batch adds zeros without running the model
        # (convolutions reject an empty batch; inference has no collectives).
        return tf.cond(
            tf.size(labels) > 0,
            lambda: example_sums(features, labels),
            lambda: tf.zeros([3], tf.float64),
        )

    def example_sums(features, labels):
        logits = model(features, training=False)
        # float64 sums: float32 would lose examples' worth of precision on large sets.
        return tf.stack(
            [
                tf.reduce_sum(tf.cast(per_example_loss(labels, logits), tf.float64)),
                tf.reduce_sum(tf.cast(per_example_metric(labels, logits), tf.float64)),
                tf.cast(tf.shape(logits)[0], tf.float64),
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
