"""Evaluation is exact: every example counts once, however the global batches
split across replicas (a short last batch, an empty replica)."""

import numpy as np
import tensorflow as tf
from conftest import sample_statistics

from {{ cookiecutter.package_name }}.data.pipeline import (
    ArraySource,
    evaluation_batches,
    evaluation_input,
    make_plan,
)
from {{ cookiecutter.package_name }}.distribute.compat import keras
from {{ cookiecutter.package_name }}.task import (
    build_model,
    per_example_loss,
    per_example_metric,
    sample_examples,
)
from {{ cookiecutter.package_name }}.training.evaluation import evaluate

# Two full global batches of 64 and a last one of 1 example: on 2 replicas, one
# replica's share of it is empty.
EXAMPLES = 2 * 64 + 1


def batches_of(source, global_batch_size):
    return evaluation_batches(make_plan(source, source, global_batch_size))


def distributed(strategy, source, global_batch_size):
    replicas = strategy.num_replicas_in_sync
    plan = make_plan(source, source, global_batch_size // replicas, replicas)
    return evaluation_input(strategy, plan)


def test_replicas_evaluate_like_one_device_on_the_whole_set(two_replicas, one_device):
    features, labels = sample_examples(EXAMPLES, seed=3)
    examples = ArraySource(features, labels)
    with two_replicas.scope():
        model = build_model(sample_statistics())
    with one_device.scope():
        reference = build_model(sample_statistics())
    reference.set_weights(model.get_weights())
    on_replicas = evaluate(two_replicas, model, distributed(two_replicas, examples, 64))
    whole_set = evaluate(one_device, reference, distributed(one_device, examples, EXAMPLES))
    # What the model sees: the examples as evaluation prepares them.
    [(inputs, _)] = batches_of(examples, EXAMPLES)
    logits = reference(inputs, training=False)
    expected_loss = float(np.mean(per_example_loss(labels, logits).numpy().astype("float64")))
    expected_metric = float(np.mean(per_example_metric(labels, logits).numpy().astype("float64")))
    # Not halved, not missing the last example: the reference sees all 129.
    assert len(logits) == EXAMPLES
    for loss, metric in (on_replicas, whole_set):
        assert abs(loss - expected_loss) < 1e-6
        assert abs(metric - expected_metric) < 1e-6


class WithCollective(keras.Model):
    """`model`, with an all-reduce over the replicas in inference, as a layer
    that normalizes by the global batch has; it changes no value."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def call(self, inputs, training=False):
        logits = self.model(inputs, training=training)
        context = tf.distribute.get_replica_context()
        if context is None:  # built outside the strategy's replicas
            return logits
        return logits + 0.0 * context.all_reduce("sum", tf.reduce_sum(logits))


def test_a_model_with_a_collective_in_inference_evaluates_an_empty_share(two_replicas):
    # The last global batch leaves one replica's share empty: that replica runs
    # the model too (skipping it failed to trace, or hung on several workers).
    examples = ArraySource(*sample_examples(EXAMPLES, seed=3))
    with two_replicas.scope():
        model = build_model(sample_statistics())
        with_collective = WithCollective(model)
    expected = evaluate(two_replicas, model, distributed(two_replicas, examples, 64))
    found = evaluate(two_replicas, with_collective, distributed(two_replicas, examples, 64))
    np.testing.assert_allclose(found, expected, rtol=1e-12)


def test_evaluation_batches_keep_the_short_last_batch():
    examples = ArraySource(*sample_examples(EXAMPLES, seed=3))
    sizes = [int(labels.shape[0]) for _, labels in batches_of(examples, 64)]
    assert sizes == [64, 64, 1]
