"""The loss, the metric and what the exported model returns, for the common
problems, after tf.estimator's heads (MultiClassHead, MultiLabelHead,
RegressionHead). A task takes its problem's head:

    METRIC_NAME, per_example_loss, per_example_metric, serving_outputs = (
        heads.classification(NUM_CLASSES, label_smoothing=0.1)
    )

or writes these itself for another problem (a tabular project's
examples/token_task.py does: its metric is top-2 accuracy). Each computes in
float32 whatever the compute dtype: float16 loses the softmax's and the loss's
precision.
"""

import collections

import tensorflow as tf

from {{ cookiecutter.package_name }}.distribute.compat import keras

Head = collections.namedtuple(
    "Head", ["metric_name", "per_example_loss", "per_example_metric", "serving_outputs"]
)


def classification(num_classes, label_smoothing=0.0):
    """One class an example, from its logits: cross-entropy against the label
    smoothed by `label_smoothing` (1 - it on the label's class, it spread over
    all classes: 0.1 suits large classifiers), accuracy, and the logits with
    their probabilities."""

    def per_example_loss(labels, logits):
        logits = tf.cast(logits, tf.float32)
        # Labels of shape [batch] or [batch, 1] (tf_keras's compiled loss adds the 1).
        labels = tf.reshape(tf.cast(labels, tf.int32), tf.shape(logits)[:-1])
        return keras.losses.categorical_crossentropy(
            tf.one_hot(labels, num_classes),
            logits,
            from_logits=True,
            label_smoothing=label_smoothing,
        )

    def per_example_metric(labels, logits):
        predictions = tf.argmax(logits, axis=-1, output_type=tf.int64)
        labels = tf.reshape(tf.cast(labels, tf.int64), tf.shape(predictions))
        return tf.cast(tf.equal(predictions, labels), tf.float32)

    def serving_outputs(logits):
        return {"logits": logits, "probabilities": tf.nn.softmax(logits)}

    return Head("accuracy", per_example_loss, per_example_metric, serving_outputs)


def multi_label(num_labels):
    """Any number of `num_labels` tags an example (a 0/1 vector), from a logit a
    tag: the sigmoid cross-entropy averaged over the tags, the share of tags
    predicted right (a logit above 0 for a tag), and each tag's logit and
    probability."""

    def as_logits_and_labels(labels, logits):
        logits = tf.cast(logits, tf.float32)
        return logits, tf.reshape(tf.cast(labels, tf.float32), [-1, num_labels])

    def per_example_loss(labels, logits):
        logits, labels = as_logits_and_labels(labels, logits)
        return tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels, logits), axis=-1)

    def per_example_metric(labels, logits):
        logits, labels = as_logits_and_labels(labels, logits)
        predicted = tf.cast(logits > 0, tf.float32)
        return tf.reduce_mean(tf.cast(tf.equal(predicted, labels), tf.float32), axis=-1)

    def serving_outputs(logits):
        return {"logits": logits, "probabilities": tf.sigmoid(logits)}

    return Head("tag_accuracy", per_example_loss, per_example_metric, serving_outputs)


def regression():
    """A float target, from one output: the squared error (on the target's
    scale: a target whose standard deviation is far from 1 wants a learning
    rate divided by its variance), the absolute error (lower is better), and
    the prediction."""

    def errors(labels, predictions):
        predictions = tf.reshape(tf.cast(predictions, tf.float32), [-1])
        return predictions - tf.reshape(tf.cast(labels, tf.float32), [-1])

    def per_example_loss(labels, predictions):
        return tf.square(errors(labels, predictions))

    def per_example_metric(labels, predictions):
        return tf.abs(errors(labels, predictions))

    def serving_outputs(predictions):
        return {"prediction": tf.reshape(predictions, [-1])}

    return Head("mean_absolute_error", per_example_loss, per_example_metric, serving_outputs)
