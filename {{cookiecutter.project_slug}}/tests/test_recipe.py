"""The training recipe (training/optimizer.py): the learning rate follows the global
batch, warms up and decays by the optimizer's step; AdamW decays what it should;
LAMB takes the paper's steps and resumes exactly; the weights' moving averages
are kept in sync, checkpointed and used.
(The equivalence tests check that 2 replicas x b get the rate of 1 device x 2b;
test_resume.py that a run killed in its warmup resumes on the same rates.)"""

import os

import numpy as np
import pytest
import tensorflow as tf
from conftest import LOOPS, assert_in_sync, assert_losses_alike, trainable_weights
from keras import Variable as Keras3Variable
from keras.optimizers import Lamb as Keras3Lamb

from {{ cookiecutter.package_name }} import TrainerError
from {{ cookiecutter.package_name }}.config import TrainConfig
from {{ cookiecutter.package_name }}.data import statistics
from {{ cookiecutter.package_name }}.distribute.compat import keras
from {{ cookiecutter.package_name }}.training.assembly import build_engine, plan_run, train
from {{ cookiecutter.package_name }}.training.lamb import Lamb
from {{ cookiecutter.package_name }}.training.optimizer import (
    WarmupThenDecay,
    describe_scaling,
    large_batch_note,
    learning_rate_schedule,
    make_optimizer,
    scaled_learning_rate,
    weight_averages,
)


@pytest.mark.parametrize(
    "scaling, global_batch, expected",
    [("linear", 1024, 0.04), ("linear", 64, 0.0025), ("sqrt", 1024, 0.02), ("none", 1024, 0.01)],
)
def test_the_rate_is_scaled_by_the_global_batch(scaling, global_batch, expected):
    config = TrainConfig(learning_rate=0.01, learning_rate_scaling=scaling)
    assert scaled_learning_rate(config, global_batch) == pytest.approx(expected)


@pytest.mark.parametrize(
    "optimizer, rule, at_4096",
    [
        ("adam", "sqrt", 0.04),
        ("adamw", "sqrt", 0.04),
        ("lamb", "sqrt", 0.04),
        ("sgd", "linear", 0.16),
    ],
)
def test_by_default_the_rate_follows_the_optimizers_scaling_rule(optimizer, rule, at_4096):
    # At 16x the reference batch, Adam on the linear rule would get 16x the rate.
    config = TrainConfig(learning_rate=0.01, optimizer=optimizer)
    assert scaled_learning_rate(config, 4096) == pytest.approx(at_4096)
    assert describe_scaling(config, 4096) == (
        f"0.01 at batch 256 scaled to the global batch 4096 by {rule}, {optimizer}'s rule"
    )
    given = TrainConfig(learning_rate=0.01, optimizer=optimizer, learning_rate_scaling="none")
    assert describe_scaling(given, 32) == (
        "--learning-rate as given, not scaled to the global batch 32"
    )


def test_adaptive_optimizers_at_8x_the_reference_batch_are_told_the_epochs_that_held():
    assert large_batch_note(TrainConfig(optimizer="adam"), 1024) is None  # 4x
    assert large_batch_note(TrainConfig(optimizer="sgd", epochs=16), 4096) is None
    note = large_batch_note(TrainConfig(optimizer="adam", epochs=16), 4096)
    assert note.startswith("the global batch 4096 is 16x --reference-batch-size 256: ")
    assert note.endswith(
        ' - consider --epochs 64, sqrt(16) times as many (docs/training.md, "The training recipe")'
    )
    for optimizer in ("adamw", "lamb"):
        assert "consider --epochs 9, sqrt(8) times" in large_batch_note(
            TrainConfig(optimizer=optimizer, epochs=3), 2048
        )


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


def step_from_ones_on_zero_gradients(strategy, config):
    """A small model's weights, all 1, after one step of `config`'s optimizer at
    rate 0.5 on zero gradients: Adam's own update is 0, only the decay moves a
    weight."""
    with strategy.scope():
        model = small_model()
        optimizer = make_optimizer(config, 0.5, model)
        optimizer.build(model.trainable_variables)
    for variable in model.trainable_variables:
        variable.assign(tf.ones_like(variable))

    @tf.function
    def step():
        def replica_step():
            zeros = [tf.zeros_like(variable) for variable in model.trainable_variables]
            optimizer.apply_gradients(zip(zeros, model.trainable_variables, strict=True))

        strategy.run(replica_step)

    step()
    return model


def test_adamw_decays_kernels_but_not_biases_or_normalization(two_replicas):
    model = step_from_ones_on_zero_gradients(
        two_replicas, TrainConfig(optimizer="adamw", weight_decay=0.1)
    )
    values = [variable.numpy() for variable in model.trainable_variables]
    kernels = [value for value in values if value.ndim == 2]
    others = [value for value in values if value.ndim < 2]
    assert len(kernels) == 2 and len(others) == 4  # 2 biases, the scale and the offset
    for value in kernels:
        np.testing.assert_allclose(value, 1 - 0.5 * 0.1, rtol=1e-6)  # decayed by lr x wd
    for value in others:
        np.testing.assert_array_equal(value, 1.0)


@pytest.mark.parametrize("optimizer", ["adamw", "lamb"])
def test_a_decaying_optimizer_refuses_a_model_that_adds_l2_regularization_too(
    two_replicas, optimizer
):
    config = TrainConfig(optimizer=optimizer)
    with two_replicas.scope():
        model = small_model(regularizer=keras.regularizers.L2(1e-4))
        with pytest.raises(TrainerError, match=rf"--optimizer {optimizer} decays the weights too"):
            make_optimizer(config, 0.01, model)
        make_optimizer(TrainConfig(optimizer="adam"), 0.01, model)  # the L2 alone is fine
        # Its own decay off, the model's L2 stands in: one decay, not two.
        make_optimizer(TrainConfig(optimizer=optimizer, weight_decay=0.0), 0.01, model)


def reference_lamb(weights, gradients, learning_rate, weight_decay, adapted, epsilon=1e-6):
    """LAMB in numpy, as the paper writes it (beta_1 0.9, beta_2 0.999): each
    step's Adam direction plus the decay, scaled by |w| / |direction| for the
    `adapted` variables (by 1 while |w| is 0); the others take Adam's step alone."""
    weights = [np.array(w, dtype=np.float64) for w in weights]
    m = [np.zeros_like(w) for w in weights]
    v = [np.zeros_like(w) for w in weights]
    for t, step_gradients in enumerate(gradients, start=1):
        for i, g in enumerate(step_gradients):
            m[i] = 0.9 * m[i] + 0.1 * g
            v[i] = 0.999 * v[i] + 0.001 * g**2
            direction = (m[i] / (1 - 0.9**t)) / (np.sqrt(v[i] / (1 - 0.999**t)) + epsilon)
            if adapted[i]:
                direction = direction + weight_decay * weights[i]
                if np.linalg.norm(weights[i]) > 0:
                    direction *= np.linalg.norm(weights[i]) / np.linalg.norm(direction)
            weights[i] = weights[i] - learning_rate * direction
    return weights


def lamb_case(model, steps=4):
    """Weights of `model`'s shapes and `steps` gradients for each, all non-zero."""
    rng = np.random.default_rng(7)
    shapes = [variable.shape for variable in model.trainable_variables]
    weights = [rng.normal(size=shape).astype(np.float32) for shape in shapes]
    scales = [0.1 * (i + 1) for i in range(len(shapes))]
    gradients = [
        [
            rng.normal(scale=scale, size=shape).astype(np.float32)
            for scale, shape in zip(scales, shapes, strict=True)
        ]
        for _ in range(steps)
    ]
    return weights, gradients


def apply_steps(optimizer, variables, gradients):
    for step_gradients in gradients:
        optimizer.apply_gradients(
            zip([tf.constant(g) for g in step_gradients], variables, strict=True)
        )


def test_lamb_takes_the_papers_steps_and_keras_3s_where_they_agree():
    model = small_model()
    weights, gradients = lamb_case(model)
    for variable, value in zip(model.trainable_variables, weights, strict=True):
        variable.assign(value)
    apply_steps(
        Lamb(learning_rate=0.05, weight_decay_rate=0.1), model.trainable_variables, gradients
    )
    # Kernels decayed and scaled by their trust ratio; biases and the
    # normalization's scale and offset take Adam's step alone.
    adapted = [len(w.shape) >= 2 for w in weights]
    expected = reference_lamb(weights, gradients, 0.05, 0.1, adapted)
    for variable, value in zip(model.trainable_variables, expected, strict=True):
        np.testing.assert_allclose(variable.numpy(), value, rtol=1e-5, atol=1e-6)
    # Keras 3's keras.optimizers.Lamb scales every variable and decays none here:
    # the reference gives its numbers too, so both Lambs take the same steps.
    keras_3 = [Keras3Variable(value) for value in weights]
    apply_steps(Keras3Lamb(learning_rate=0.05, epsilon=1e-6), keras_3, gradients)
    expected = reference_lamb(weights, gradients, 0.05, 0.0, [True] * len(weights))
    for variable, value in zip(keras_3, expected, strict=True):
        np.testing.assert_allclose(variable.numpy(), value, rtol=1e-5, atol=1e-6)


def test_lamb_steps_a_zero_kernel_and_an_embeddings_sparse_gradient_as_the_paper():
    # A kernel still at 0 has no trust ratio (0 / |step|): Adam's step, not a NaN.
    # An Embedding's gradient comes as IndexedSlices of the rows looked up.
    zero = keras.layers.Dense(3, use_bias=False, kernel_initializer="zeros")
    zero.build((None, 4))
    embedding = keras.layers.Embedding(6, 3)
    embedding.build((None,))
    variables = [zero.kernel, embedding.embeddings]
    weights = [variable.numpy() for variable in variables]
    rng = np.random.default_rng(3)
    dense = rng.normal(size=(4, 3)).astype(np.float32)
    rows = rng.normal(size=(2, 3)).astype(np.float32)
    sparse = tf.IndexedSlices(tf.constant(rows), tf.constant([1, 4]), tf.constant([6, 3]))
    Lamb(learning_rate=0.1, weight_decay_rate=0.1).apply_gradients(
        zip([tf.constant(dense), sparse], variables, strict=True)
    )
    densified = np.zeros((6, 3), np.float32)
    densified[[1, 4]] = rows
    expected = reference_lamb(weights, [[dense, densified]], 0.1, 0.1, [True, True])
    for variable, value in zip(variables, expected, strict=True):
        np.testing.assert_allclose(variable.numpy(), value, rtol=1e-5, atol=1e-6)
    assert np.all(np.isfinite(variables[0].numpy())) and np.any(variables[0].numpy() != 0)


def test_lamb_decays_and_scales_kernels_only_alike_on_every_replica(two_replicas):
    # A kernel's step is its decay, 0.1 w, which its trust ratio |w| / |0.1 w|
    # scales to w itself: the rate's share of w goes, whatever the decay (AdamW
    # would take 0.5 x 0.1 of it).
    model = step_from_ones_on_zero_gradients(
        two_replicas, TrainConfig(optimizer="lamb", weight_decay=0.1)
    )
    assert_in_sync(two_replicas, model.trainable_variables)
    values = [variable.numpy() for variable in model.trainable_variables]
    kernels = [value for value in values if value.ndim == 2]
    others = [value for value in values if value.ndim < 2]
    assert len(kernels) == 2 and len(others) == 4
    for value in kernels:
        np.testing.assert_allclose(value, 0.5, rtol=1e-6)
    for value in others:
        np.testing.assert_array_equal(value, 1.0)


def test_lamb_resumed_from_a_checkpoint_takes_the_uninterrupted_steps(tmp_path):
    def fresh():
        model = small_model()
        return model, make_optimizer(TrainConfig(optimizer="lamb"), 0.05, model)

    model, optimizer = fresh()
    weights, gradients = lamb_case(model, steps=6)
    for variable, value in zip(model.trainable_variables, weights, strict=True):
        variable.assign(value)
    apply_steps(optimizer, model.trainable_variables, gradients[:3])
    saved = tf.train.Checkpoint(model=model, optimizer=optimizer).write(str(tmp_path / "ckpt"))
    apply_steps(optimizer, model.trainable_variables, gradients[3:])

    resumed, resumed_optimizer = fresh()
    resumed_optimizer.build(resumed.trainable_variables)
    tf.train.Checkpoint(model=resumed, optimizer=resumed_optimizer).read(saved).assert_consumed()
    assert int(resumed_optimizer.iterations) == 3
    apply_steps(resumed_optimizer, resumed.trainable_variables, gradients[3:])
    for variable, uninterrupted in zip(
        resumed.trainable_variables, model.trainable_variables, strict=True
    ):
        np.testing.assert_array_equal(variable.numpy(), uninterrupted.numpy())


@pytest.mark.parametrize("loop", LOOPS)
def test_lamb_on_two_replicas_trains_like_one_device(
    two_replicas, one_device, sgd_config, without_random_layers, loop, caplog
):
    # Its trust ratios are taken from the all-reduced gradient: per replica they
    # would differ. The sample model's L2 stands in for LAMB's own decay.
    # fmt: off
    lamb = dict(
        optimizer="lamb", weight_decay=0.0, learning_rate=0.01, reference_batch_size=16{% if cookiecutter.training_loop == "both" %}, loop=loop{% endif %}
    )
    # fmt: on
    distributed = train(sgd_config("two", 64, **lamb), two_replicas)
    single = train(sgd_config("one", 128, **lamb), one_device)
    assert_losses_alike(distributed, single)
    # At 8x the reference batch, each run says what the recipe study found there.
    notes = [m for m in caplog.messages if m.startswith("the global batch 128 is 8x")]
    assert len(notes) == 2, caplog.messages


@pytest.mark.parametrize("loop", LOOPS)
def test_weight_averages_are_in_sync_checkpointed_evaluated_and_final(
    two_replicas, sgd_config, loop
):
    """--ema-decay: the averages are mirrored and equal on every replica, the
    checkpoint holds them beside the weights, the evaluation and the final
    weights are theirs, and the training itself is unchanged."""
    plain = train(sgd_config("plain", 64{% if cookiecutter.training_loop == "both" %}, loop=loop{% endif %}), two_replicas)
    config = sgd_config("averaged", 64, ema_decay=0.9{% if cookiecutter.training_loop == "both" %}, loop=loop{% endif %})
    averaged = train(config, two_replicas)
    assert averaged["ema_decay"] == 0.9
    # Each evaluation swapped the averages back out: training went on unchanged.
    np.testing.assert_allclose(averaged["losses"], plain["losses"], rtol=0, atol=1e-6)
    assert abs(averaged["eval_loss"] - plain["eval_loss"]) > 1e-5  # evaluated on the averages

    plan = plan_run(config, two_replicas)
    engine = build_engine(config, two_replicas, plan, statistics.load(config.model_dir))
    latest = tf.train.latest_checkpoint(os.path.join(config.model_dir, "checkpoints"))
    restored = tf.train.Checkpoint(model=engine.model, optimizer=engine.optimizer)
    restored.read(latest).expect_partial()
    assert_in_sync(two_replicas, weight_averages(engine.optimizer))
    averages = [average.numpy() for average in weight_averages(engine.optimizer)]
    weights = [variable.numpy() for variable in engine.model.trainable_variables]
    # The final weights are the averages; the checkpoint's weights, the plain run's.
    for average, final in zip(averages, trainable_weights(averaged["weights_path"]), strict=True):
        np.testing.assert_allclose(final, average, rtol=0, atol=1e-6)
    for weight, trained in zip(weights, trainable_weights(plain["weights_path"]), strict=True):
        np.testing.assert_allclose(weight, trained, rtol=0, atol=1e-6)
    assert not all(np.allclose(a, w, atol=1e-5) for a, w in zip(averages, weights, strict=True))
