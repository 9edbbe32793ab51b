"""The custom engine under MirroredStrategy computes what one device computes."""

import numpy as np
import tensorflow as tf
from conftest import assert_in_sync, assert_same_weights, is_distributed{% if cookiecutter.mixed_precision == "yes" %}, load_weights{% endif %}

from {{ cookiecutter.package_name }}.data import synthetic_examples
from {{ cookiecutter.package_name }}.engine_custom import build_training_state, make_train_function
from {{ cookiecutter.package_name }}.training import train
{%- if cookiecutter.training_loop == "both" %}

LOOP = {"loop": "custom"}
{%- else %}

LOOP = {}
{%- endif %}


def test_two_replicas_train_like_one_device(two_replicas, one_device, sgd_config):
    distributed = train(sgd_config("two", 64, **LOOP), two_replicas)
    single = train(sgd_config("one", 128, **LOOP), one_device)
    assert (distributed["replicas"], single["replicas"]) == (2, 1)
    np.testing.assert_allclose(distributed["losses"], single["losses"], rtol=0, atol=1e-5)
    assert_same_weights(distributed["weights_path"], single["weights_path"], atol=1e-5)
    assert distributed["final_loss"] < distributed["losses"][0]
    assert abs(distributed["eval_loss"] - single["eval_loss"]) < 1e-5


def test_several_steps_per_call_equal_one_step_per_call(two_replicas, sgd_config):
    # 10 steps per epoch in calls of 4: 4 + 4 + a short last call of 2.
    grouped = sgd_config("grouped", 16, steps_per_epoch=10, steps_per_call=4, **LOOP)
    single = sgd_config("single", 16, steps_per_epoch=10, steps_per_call=1, **LOOP)
    grouped, single = train(grouped, two_replicas), train(single, two_replicas)
    np.testing.assert_allclose(grouped["losses"], single["losses"], rtol=0, atol=1e-6)
    assert_same_weights(grouped["weights_path"], single["weights_path"], atol=1e-6)


def test_every_variable_is_mirrored_and_in_sync(two_replicas, sgd_config):
    config = sgd_config("sync", 16, optimizer="adam")
    state = build_training_state(two_replicas, config)
    train_steps = make_train_function(two_replicas, state, global_batch_size=32)
    examples = tf.data.Dataset.from_tensor_slices(synthetic_examples(256, seed=0))
    batches = examples.batch(32, drop_remainder=True)
    iterator = iter(two_replicas.experimental_distribute_dataset(batches))
    assert np.isfinite(float(train_steps(iterator, tf.constant(4))))
    assert_in_sync(two_replicas, state.model.variables + state.optimizer.variables)
    # Metric variables are synchronized on read: each replica keeps partial sums.
    assert all(is_distributed(v) for v in state.metric.variables)
{%- if cookiecutter.mixed_precision == "yes" %}


def test_mixed_precision_run_stays_finite(two_replicas, sgd_config):
    summary = train(sgd_config("mixed", 16, mixed_precision=True, **LOOP), two_replicas)
    assert all(np.isfinite(summary["losses"]))
    assert all(np.isfinite(w).all() for w in load_weights(summary["weights_path"]))
{%- endif %}
