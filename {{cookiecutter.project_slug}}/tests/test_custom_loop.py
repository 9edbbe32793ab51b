"""The custom engine under MirroredStrategy computes what one device computes."""

import os

import numpy as np
import pytest
import tensorflow as tf
{%- if cookiecutter.mixed_precision != "no" %}
from conftest import (
{%- if cookiecutter.task == "tabular" %}
    STRING_INPUTS,
{%- endif %}
    assert_accumulated_like_one_device,
    assert_clipped_like_one_device,
    assert_in_sync,
    assert_losses_alike,
    assert_mixed_precision,
    assert_same_weights,
    assert_trained_alike,
    is_distributed,
    load_weights,
    sample_statistics,
    with_every_engine_model,
)
{%- else %}
from conftest import (
{%- if cookiecutter.task == "tabular" %}
    STRING_INPUTS,
{%- endif %}
    assert_accumulated_like_one_device,
    assert_clipped_like_one_device,
    assert_in_sync,
    assert_losses_alike,
    assert_same_weights,
    assert_trained_alike,
    is_distributed,
    sample_statistics,
    with_every_engine_model,
)
{%- endif %}

from {{ cookiecutter.package_name }} import TrainerError
from {{ cookiecutter.package_name }}.distribute.compat import keras
{%- if cookiecutter.mixed_precision != "no" %}
from {{ cookiecutter.package_name }}.distribute.precision import set_precision_policy
{%- endif %}
from {{ cookiecutter.package_name }}.task import sample_examples
from {{ cookiecutter.package_name }}.training import engine_custom
from {{ cookiecutter.package_name }}.training.assembly import train
from {{ cookiecutter.package_name }}.training.engine_custom import (
    build_training_state,
    check_compilable,
    make_train_function,
)
{%- if cookiecutter.training_loop == "both" %}

LOOP = {"loop": "custom"}
{%- else %}

LOOP = {}
{%- endif %}


def test_two_replicas_train_like_one_device(
    two_replicas, one_device, sgd_config, without_random_layers
):
    distributed = train(sgd_config("two", 64, **LOOP), two_replicas)
    config = sgd_config("one", 128, **LOOP)
    single = train(config, one_device)
    assert (distributed["replicas"], single["replicas"]) == (2, 1)
    # One global batch, one learning rate: scaled by the global batch (128, the
    # reference here), not by a replica's (64).
    rate = sgd_config("rate", 64).learning_rate
    assert distributed["peak_learning_rate"] == single["peak_learning_rate"] == pytest.approx(rate)
    assert_losses_alike(distributed, single)
    # (Training moved the weights: assert_trained_alike says so. Whether a few
    # gentle steps lower the loss is the data's luck at the image tests' rate.)
    assert_trained_alike(distributed, single, config, one_device)


def test_a_loss_scaled_by_the_local_batch_fails_the_comparison(
    two_replicas, one_device, sgd_config, without_random_layers, monkeypatch
):
    """The comparison above can fail: each replica's loss averaged over its own
    64 examples, not the global batch of 128, doubles every update."""
    config = sgd_config("one", 128, **LOOP)
    single = train(config, one_device)
    replica_loss = engine_custom.replica_loss

    def scaled_by_the_local_batch(model, labels, logits, global_batch_size, accumulate_steps=1):
        return replica_loss(model, labels, logits, global_batch_size // 2, accumulate_steps)

    monkeypatch.setattr(engine_custom, "replica_loss", scaled_by_the_local_batch)
    distributed = train(sgd_config("two", 64, **LOOP), two_replicas)
    with pytest.raises(AssertionError, match="trainable variable"):
        assert_trained_alike(distributed, single, config, one_device)
    with pytest.raises(AssertionError):
        assert_losses_alike(distributed, single)


def test_several_steps_per_call_equal_one_step_per_call(two_replicas, sgd_config):
    # 10 steps per epoch in calls of 4: 4 + 4 + a short last call of 2.
    grouped = sgd_config("grouped", 16, steps_per_epoch=10, steps_per_call=4, **LOOP)
    single = sgd_config("single", 16, steps_per_epoch=10, steps_per_call=1, **LOOP)
    grouped, single = train(grouped, two_replicas), train(single, two_replicas)
    np.testing.assert_allclose(grouped["losses"], single["losses"], rtol=0, atol=1e-6)
    assert_same_weights(grouped["weights_path"], single["weights_path"], atol=1e-6)


def test_gradient_clipping_on_two_replicas_equals_one_device(
    two_replicas, one_device, sgd_config, without_random_layers
):
    assert_clipped_like_one_device(two_replicas, one_device, sgd_config, LOOP)


def test_accumulating_two_micro_batches_on_two_replicas_equals_one_device(
    two_replicas, one_device, sgd_config, without_batch_norm, without_random_layers
):
    assert_accumulated_like_one_device(two_replicas, one_device, sgd_config, LOOP)


{%- if cookiecutter.task == "tabular" %}


@pytest.mark.skipif(STRING_INPUTS, reason="XLA compiles no string ops: the inputs hold strings")
def test_xla_compiled_step_trains_like_the_plain_step(
    two_replicas, sgd_config, without_random_layers
):
    config = sgd_config("plain", 64, epochs=2, **LOOP)
    plain = train(config, two_replicas)
    compiled = train(sgd_config("xla", 64, epochs=2, jit_compile=True, **LOOP), two_replicas)
    assert_losses_alike(compiled, plain)
    assert_trained_alike(compiled, plain, config, two_replicas)


@pytest.mark.skipif(STRING_INPUTS, reason="XLA compiles no string ops: the inputs hold strings")
def test_xla_compiles_the_replica_step_only_when_asked(two_replicas, sgd_config):
    examples = tf.data.Dataset.from_tensor_slices(sample_examples(64, seed=0))
    batches = examples.batch(32, drop_remainder=True)
    compiled_functions = []
    for jit_compile in (True, False):
        config = sgd_config(f"xla-{jit_compile}", 16)
        state = build_training_state(
            two_replicas, config, sample_statistics(), config.learning_rate
        )
        train_steps = make_train_function(two_replicas, state, 32, jit_compile)
        iterator = iter(two_replicas.experimental_distribute_dataset(batches))
        graph = train_steps.get_concrete_function(iterator, tf.constant(1)).graph.as_graph_def()
        library = graph.library.function
        compiled_functions.append([f for f in library if f.attr["_XlaMustCompile"].b])
    assert [bool(found) for found in compiled_functions] == [True, False]
{%- endif %}


def test_xla_is_refused_for_a_model_whose_layers_all_reduce_in_the_step():
    # Compiled, such a layer fails deep in tracing ("`merge_call` called while
    # defining a new graph"): refused before, naming the layers.
    inputs = keras.Input(shape=(4,))
    normalized = keras.layers.BatchNormalization(synchronized=True, name="synced")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(2)(normalized))
    with pytest.raises(TrainerError, match=r"^--jit-compile cannot .*\(synced\) all-reduce inside"):
        check_compilable(model)
    check_compilable(keras.Model(inputs, keras.layers.Dense(2)(inputs)))  # no such layer


def test_xla_is_refused_for_a_model_of_string_inputs():
    # XLA has no string kernels: it fails at the first step, in a long graph error.
    inputs = keras.Input(shape=(), dtype="string", name="city")
    indices = keras.layers.StringLookup(vocabulary=["Lyon", "Oslo"])(inputs)
    model = keras.Model(inputs, keras.layers.Embedding(3, 2)(indices))
    with pytest.raises(TrainerError, match=r"^--jit-compile cannot .* inputs city are strings"):
        check_compilable(model)


def with_synchronized_batch_norm(model):
    normalized = keras.layers.BatchNormalization(synchronized=True, name="synced")(model.outputs[0])
    return keras.Model(model.inputs, normalized)


def test_xla_on_such_a_model_is_refused_before_anything_is_written(
    two_replicas, sgd_config, monkeypatch
):
    with_every_engine_model(monkeypatch, with_synchronized_batch_norm)
    config = sgd_config("xla", 16, jit_compile=True, **LOOP)
    refused = r"^--jit-compile cannot .* BatchNormalization\(synchronized=True\) layers \(.+\)"
    with pytest.raises(TrainerError, match=refused):
        train(config, two_replicas)
    assert not os.path.exists(config.model_dir)


def test_every_variable_is_mirrored_and_in_sync(two_replicas, sgd_config):
    config = sgd_config("sync", 16, optimizer="adam")
    state = build_training_state(two_replicas, config, sample_statistics(), config.learning_rate)
    train_steps = make_train_function(two_replicas, state, global_batch_size=32)
    examples = tf.data.Dataset.from_tensor_slices(sample_examples(256, seed=0))
    batches = examples.batch(32, drop_remainder=True)
    iterator = iter(two_replicas.experimental_distribute_dataset(batches))
    loss, metric = train_steps(iterator, tf.constant(4))
    assert np.isfinite(float(loss)) and np.isfinite(float(metric))
    assert_in_sync(two_replicas, state.model.variables + state.optimizer.variables)
    # Metric variables are synchronized on read: each replica keeps partial sums.
    assert all(is_distributed(v) for v in state.metric.variables)
{%- if cookiecutter.mixed_precision != "no" %}


def test_mixed_precision_run_stays_finite(two_replicas, sgd_config):
    summary = train(sgd_config("mixed", 16, mixed_precision=True, **LOOP), two_replicas)
    assert all(np.isfinite(summary["losses"]))
    assert all(np.isfinite(w).all() for w in load_weights(summary["weights_path"]))


def test_mixed_precision_computes_in_{{ cookiecutter.mixed_precision }}(two_replicas, sgd_config):
    set_precision_policy(True)
    config = sgd_config("dtype", 16, mixed_precision=True, **LOOP)
    state = build_training_state(two_replicas, config, sample_statistics(), config.learning_rate)
    assert_mixed_precision(state.model, state.optimizer)
{%- endif %}
