"""model.fit under MirroredStrategy computes what one device computes."""

{%- if cookiecutter.keras_package == "keras3" %}
import keras
{%- endif %}
import numpy as np
{%- if cookiecutter.keras_package == "keras3" %}
import pytest
{%- endif %}
import tensorflow as tf
from conftest import assert_in_sync, assert_same_weights, is_distributed{% if cookiecutter.mixed_precision == "yes" %}, load_weights{% endif %}

from {{ cookiecutter.package_name }}.data import synthetic_arrays, training_batches
{%- if cookiecutter.keras_package == "keras3" %}
from {{ cookiecutter.package_name }}.model import build_model
{%- endif %}
from {{ cookiecutter.package_name }}.train_fit import build_compiled_model
from {{ cookiecutter.package_name }}.training import {% if cookiecutter.keras_package == "keras3" %}TrainingError, {% endif %}train
{%- if cookiecutter.training_loop == "both" %}

LOOP = {"loop": "fit"}
{%- else %}

LOOP = {}
{%- endif %}


def batches(count, global_batch_size):
    examples = tf.data.Dataset.from_tensor_slices(synthetic_arrays(count, seed=0))
    return training_batches(examples, global_batch_size, seed=0)


def test_two_replicas_train_like_one_device(two_replicas, one_device, sgd_config):
    distributed = train(sgd_config("two", 64, **LOOP), two_replicas)
    single = train(sgd_config("one", 128, **LOOP), one_device)
    assert (distributed["replicas"], single["replicas"]) == (2, 1)
    assert distributed["global_batch_size"] == single["global_batch_size"] == 128
    np.testing.assert_allclose(distributed["losses"], single["losses"], rtol=0, atol=1e-5)
    assert_same_weights(distributed["weights_path"], single["weights_path"], atol=1e-5)
    assert distributed["final_loss"] < distributed["losses"][0]


def test_every_variable_is_mirrored_and_in_sync(two_replicas, sgd_config):
    config = sgd_config("sync", 16, optimizer="adam")
    model = build_compiled_model(two_replicas, config)
    model.fit(batches(256, 32), epochs=1, verbose=0)
    assert_in_sync(two_replicas, model.variables + model.optimizer.variables)
    # Metric variables are synchronized on read: each replica keeps partial sums.
    metric_variables = [v for metric in model.metrics for v in metric.variables]
    assert metric_variables and all(is_distributed(v) for v in metric_variables)
{%- if cookiecutter.mixed_precision == "yes" %}


def test_mixed_precision_run_stays_finite(two_replicas, sgd_config):
    summary = train(sgd_config("mixed", 16, mixed_precision=True, **LOOP), two_replicas)
    assert all(np.isfinite(summary["losses"]))
    assert all(np.isfinite(w).all() for w in load_weights(summary["weights_path"]))
{%- endif %}
{%- if cookiecutter.keras_package == "keras3" %}


def test_steps_per_execution_is_refused_on_several_replicas(two_replicas, sgd_config):
    with pytest.raises(TrainingError, match=r"keras-team/keras/issues/19246"):
        build_compiled_model(two_replicas, sgd_config("spe", 16, steps_per_execution=2))


@pytest.mark.upstream
@pytest.mark.xfail(
    strict=True,
    raises=tf.errors.InvalidArgumentError,
    reason="keras-team/keras#19246: steps_per_execution > 1 fails on several replicas;"
    " when this passes, upstream is fixed: drop check_steps_per_execution",
)
def test_upstream_keras3_fit_with_steps_per_execution_still_fails(two_replicas):
    with two_replicas.scope():
        model = build_model()
        model.compile(
            optimizer="sgd",
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            steps_per_execution=2,
        )
    model.fit(batches(256, 32), epochs=1, verbose=0)
{%- else %}


def test_steps_per_execution_works_with_tf_keras(two_replicas, one_device, sgd_config):
    distributed = train(sgd_config("two", 64, steps_per_execution=4, **LOOP), two_replicas)
    single = train(sgd_config("one", 128, **LOOP), one_device)
    assert_same_weights(distributed["weights_path"], single["weights_path"], atol=1e-5)
{%- endif %}
