"""Dynamic loss scaling on several replicas: a step whose gradients overflow on
any one replica is skipped on every replica, and the scale halves.

Keras 3's own LossScaleOptimizer decides on replica 0's gradients alone
(distribute/compat.py says how): with the overflow on replica 1, its weights became -inf
and the scale did not halve. Dynamic loss scaling overflows on purpose every
~2,000 steps, so a multi-GPU run meets this within hours.
"""

import numpy as np
import pytest
import tensorflow as tf
from conftest import LOOPS, REPLICAS

from {{ cookiecutter.package_name }}.data.pipeline import training_input
from {{ cookiecutter.package_name }}.distribute.compat import keras
from {{ cookiecutter.package_name }}.distribute.precision import set_precision_policy
from {{ cookiecutter.package_name }}.task import build_model
{%- if cookiecutter.training_loop == "both" %}
from {{ cookiecutter.package_name }}.training import engine_custom, engine_fit
{%- else %}
from {{ cookiecutter.package_name }}.training import engine_{{ cookiecutter.training_loop }}
{%- endif %}
from {{ cookiecutter.package_name }}.training.assembly import build_engine, plan_run

PER_REPLICA_BATCH = 8
# Where each engine looks up the model builder.
{%- if cookiecutter.training_loop == "both" %}
ENGINE_MODULES = {"fit": engine_fit, "custom": engine_custom}
{%- else %}
ENGINE_MODULES = {"{{ cookiecutter.training_loop }}": engine_{{ cookiecutter.training_loop }}}
{%- endif %}


class OverflowOn(keras.layers.Layer):
    """Logits times inf on one replica: that replica's loss and gradients overflow."""

    def __init__(self, replica, **kwargs):
        super().__init__(dtype="float32", **kwargs)
        self.replica = replica

    def call(self, logits):
        context = tf.distribute.get_replica_context()
        if context is None:  # built under the strategy's scope, outside a replica
            return logits
        overflowing = tf.equal(context.replica_id_in_sync_group, self.replica)
        return logits * tf.where(overflowing, np.inf, 1.0)


def overflowing_model(replica):
    """build_model's network, overflowing on `replica`."""

    def build(statistics):
        model = build_model(statistics)
        return keras.Model(model.inputs, OverflowOn(replica)(model.outputs[0]))

    return build


def trainable_weights(model):
    return [variable.numpy() for variable in model.trainable_variables]


def loss_scale(optimizer):
{%- if cookiecutter.keras_package == "keras3" %}
    return float(optimizer.dynamic_scale.numpy())
{%- else %}
    return float(tf.convert_to_tensor(optimizer.loss_scale).numpy())
{%- endif %}


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("replica", range(REPLICAS))
def test_overflow_on_one_replica_skips_the_step_everywhere(
    two_replicas, sgd_config, monkeypatch, loop, replica
):
    config = sgd_config(
        "overflow",
        PER_REPLICA_BATCH,
        mixed_precision=True,
{%- if cookiecutter.training_loop == "both" %}
        loop=loop,
{%- endif %}
    )
    monkeypatch.setattr(ENGINE_MODULES[loop], "build_model", overflowing_model(replica))
    set_precision_policy(True)
    plan = plan_run(config, two_replicas)
    engine = build_engine(config, two_replicas, plan, plan.train.statistics())
    before, scale = trainable_weights(engine.model), loss_scale(engine.optimizer)
    iterator = iter(training_input(two_replicas, plan, config.seed, epoch=0))
    engine.train(iterator, tf.constant(1))
    after = trainable_weights(engine.model)
    assert all(np.isfinite(weights).all() for weights in after)
    # The step was skipped (batch normalization's moving statistics still move:
    # the forward pass updates them, as on one device).
    for old, new in zip(before, after, strict=True):
        np.testing.assert_array_equal(old, new)
    assert loss_scale(engine.optimizer) == scale / 2

{%- if cookiecutter.keras_package == "keras3" %}


@pytest.mark.upstream
@pytest.mark.xfail(
    strict=True,
    reason="Keras 3's LossScaleOptimizer decides on replica 0's gradients alone:"
    " passes, and fails the suite, the day upstream all-reduces the check",
)
def test_upstream_keras3_loss_scale_optimizer_still_sees_replica_0_only(two_replicas):
    with two_replicas.scope():
        variable = keras.Variable(np.zeros(2, "float32"))
        optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1))
        optimizer.build([variable])

    def step():
        replica_id = tf.distribute.get_replica_context().replica_id_in_sync_group
        gradient = tf.where(tf.equal(replica_id, 1), np.inf, 1.0) * tf.ones(2)
        optimizer.apply_gradients([(gradient, variable)])

    tf.function(lambda: two_replicas.run(step))()
    assert np.isfinite(variable.numpy()).all()
{%- endif %}
