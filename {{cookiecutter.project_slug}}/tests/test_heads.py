"""The heads a task takes for its loss, metric and exported outputs (toolkit/heads.py)
compute what their problem's formulas give, in float32 from any dtype."""

import numpy as np
import pytest
import tensorflow as tf

from {{ cookiecutter.package_name }}.toolkit import heads


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_classification_is_the_cross_entropy_against_the_smoothed_label(smoothing):
    head = heads.classification(4, label_smoothing=smoothing)
    logits = np.array([[-1.0, 0.0, 1.0, 2.0], [3.0, 0.0, 0.0, 0.0]], np.float32)
    targets = np.full((2, 4), smoothing / 4)
    targets[[0, 1], [1, 0]] += 1 - smoothing
    expected = -np.sum(targets * tf.nn.log_softmax(logits).numpy(), axis=1)
    # Labels as [batch] or [batch, 1] (tf_keras's compiled loss), logits in float16.
    for labels in ([1, 0], [[1], [0]]):
        loss = head.per_example_loss(tf.constant(labels), tf.constant(logits, tf.float16))
        assert loss.dtype == tf.float32
        np.testing.assert_allclose(loss.numpy(), expected, rtol=2e-3)
    for labels in ([3, 1], [[3], [1]]):
        metric = head.per_example_metric(tf.constant(labels), tf.constant(logits))
        assert metric.numpy().tolist() == [1.0, 0.0]
    assert head.metric_name == "accuracy"
    outputs = head.serving_outputs(tf.constant(logits))
    np.testing.assert_allclose(outputs["probabilities"].numpy().sum(axis=1), 1.0, rtol=1e-6)


def test_multi_label_averages_each_tags_sigmoid_cross_entropy():
    head = heads.multi_label(3)
    logits = np.array([[2.0, -1.0, 0.5]], np.float32)
    tags = np.array([[1, 0, 0]])
    probabilities = 1 / (1 + np.exp(-logits))
    expected = -np.mean(tags * np.log(probabilities) + (1 - tags) * np.log(1 - probabilities))
    loss = head.per_example_loss(tf.constant(tags), tf.constant(logits))
    np.testing.assert_allclose(loss.numpy(), [expected], rtol=1e-5)
    # Tags 0 and 1 right, tag 2 (a logit above 0, not a tag) wrong.
    metric = head.per_example_metric(tf.constant(tags), tf.constant(logits))
    np.testing.assert_allclose(metric.numpy(), [2 / 3], rtol=1e-6)
    assert head.metric_name == "tag_accuracy"


def test_regression_is_the_squared_error_and_reports_the_absolute_one():
    head = heads.regression()
    predictions = tf.constant([[51.0], [48.5]], tf.float16)
    targets = tf.constant([50.0, 50.0])
    np.testing.assert_allclose(head.per_example_loss(targets, predictions).numpy(), [1.0, 2.25])
    np.testing.assert_allclose(head.per_example_metric(targets, predictions).numpy(), [1.0, 1.5])
    assert head.serving_outputs(predictions)["prediction"].shape == (2,)
    assert head.metric_name == "mean_absolute_error"
