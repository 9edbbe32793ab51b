"""Exact evaluation, the same for both engines.

Every evaluation example counts once: the batches keep their short remainder,
each replica returns the sums of its share (an empty share adds zeros), and the
sums are added across replicas and batches inside one tf.function before the
division. `eval_loss` is the mean cross-entropy over the examples, without the
regularization term that the training loss includes.
"""

import tensorflow as tf

from {{ cookiecutter.package_name }}.model import per_example_loss

SUM = tf.distribute.ReduceOp.SUM


def make_evaluate_function(strategy, model):
    """A tf.function: distributed evaluation batches -> (loss, accuracy)."""

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
        labels = tf.cast(labels, tf.int64)
        predictions = tf.argmax(logits, axis=-1, output_type=tf.int64)
        # float64 sums: float32 would lose examples' worth of precision on large sets.
        return tf.stack(
            [
                tf.reduce_sum(tf.cast(per_example_loss(labels, logits), tf.float64)),
                tf.reduce_sum(tf.cast(tf.equal(predictions, labels), tf.float64)),
                tf.cast(tf.size(labels), tf.float64),
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
    """() -> (mean loss, accuracy) of `model` over every example of `batches`
    (distributed: data.evaluation_input): traced once, run at every epoch end."""
    evaluate_batches = make_evaluate_function(strategy, model)

    def evaluate():
        loss, accuracy = evaluate_batches(batches)
        return float(loss), float(accuracy)

    return evaluate


def evaluate(strategy, model, batches):
    """One evaluation of `model` over `batches` (see make_evaluator)."""
    return make_evaluator(strategy, model, batches)()
