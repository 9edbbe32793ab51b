"""The training recipe (optimizer.py): the learning rate follows the global
batch, warms up and decays by the optimizer's step; AdamW decays what it should.
(The equivalence tests check that 2 replicas x b get the rate of 1 device x 2b;
test_resume.py that a run killed in its warmup resumes on the same rates.)"""

import numpy as np
import pytest
import tensorflow as tf

from {{ cookiecutter.package_name }} import TrainerError
from {{ cookiecutter.package_name }}.compat import keras
from {{ cookiecutter.package_name }}.config import TrainConfig
from {{ cookiecutter.package_name }}.optimizer import (
    WarmupThenDecay,
    learning_rate_schedule,
    make_optimizer,
    scaled_learning_rate,
)


@pytest.mark.parametrize(
    "scaling, global_batch, expected",
    [("linear", 1024, 0.04), ("linear", 64, 0.0025), ("sqrt", 1024, 0.02), ("none", 1024, 0.01)],
)
def test_the_rate_is_scaled_by_the_global_batch(scaling, global_batch, expected):
    config = TrainConfig(learning_rate=0.01, learning_rate_scaling=scaling)
    assert scaled_learning_rate(config, global_batch) == pytest.approx(expected)


def rates(schedule, steps):
    return [float(schedule(step)) for step in steps]


def test_warmup_rises_linearly_to_the_peak_then_the_cosine_ends_at_zero():
    schedule = WarmupThenDecay(peak=0.4, warmup_steps=4, total_steps=12, decay="cosine")
    assert rates(schedule, range(5)) == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.4])
    # Half way through the decay, half the peak; 0 once the run's 12 steps are done.
    assert rates(schedule, [8, 12, 20]) == pytest.approx([0.2, 0.0, 0.0], abs=1e-7)
    last = rates(schedule, range(4, 12))
    assert np.all(np.diff(last) < 0) and last[-1] > 0


def test_the_step_schedule_divides_by_ten_at_a_third_and_two_thirds():
    schedule = WarmupThenDecay(peak=1.0, warmup_steps=0, total_steps=30, decay="step")
    assert rates(schedule, [0, 9, 11, 19, 21, 29]) == pytest.approx(
        [1.0, 1.0, 0.1, 0.1, 0.01, 0.01]
    )


def test_the_default_warmup_is_five_percent_of_the_run():
    assert learning_rate_schedule(TrainConfig(), 256, 1000).warmup_steps == 50
    assert learning_rate_schedule(TrainConfig(warmup_steps=0), 256, 1000).warmup_steps == 0


def small_model(regularizer=None):
    inputs = keras.Input([4])
    x = keras.layers.Dense(3, kernel_regularizer=regularizer)(inputs)
    x = keras.layers.BatchNormalization()(x)
    return keras.Model(inputs, keras.layers.Dense(2)(x))


def test_adamw_decays_kernels_but_not_biases_or_normalization(two_replicas):
    config = TrainConfig(optimizer="adamw", weight_decay=0.1)
    with two_replicas.scope():
        model = small_model()
        optimizer = make_optimizer(config, 0.5, model)
        optimizer.build(model.trainable_variables)
    for variable in model.trainable_variables:
        variable.assign(tf.ones_like(variable))

    @tf.function
    def step():
        def replica_step():
            # Zero gradients: Adam's own update is 0, only the decay moves a weight.
            zeros = [tf.zeros_like(variable) for variable in model.trainable_variables]
            optimizer.apply_gradients(zip(zeros, model.trainable_variables, strict=True))

        two_replicas.run(replica_step)

    step()
    values = [variable.numpy() for variable in model.trainable_variables]
    kernels = [value for value in values if value.ndim == 2]
    others = [value for value in values if value.ndim < 2]
    assert len(kernels) == 2 and len(others) == 4  # 2 biases, the scale and the offset
    for value in kernels:
        np.testing.assert_allclose(value, 1 - 0.5 * 0.1, rtol=1e-6)  # decayed by lr x wd
    for value in others:
        np.testing.assert_array_equal(value, 1.0)


def test_adamw_refuses_a_model_that_adds_l2_regularization_too(two_replicas):
    config = TrainConfig(optimizer="adamw")
    with two_replicas.scope():
        model = small_model(regularizer=keras.regularizers.L2(1e-4))
        with pytest.raises(TrainerError, match=r"--optimizer adamw decays the weights too"):
            make_optimizer(config, 0.01, model)
        make_optimizer(TrainConfig(optimizer="adam"), 0.01, model)  # the L2 alone is fine
