"""The end-of-run check of batch normalization's moving averages: a model whose
averages lag its weights (a momentum near 1 on a short run) is warned of, one
whose averages have caught up is not, and every run records both losses."""

import logging

import numpy as np
import pytest
import tensorflow as tf

from {{ cookiecutter.package_name }}.distribute.compat import keras
from {{ cookiecutter.package_name }}.training import assembly, batch_norm_check
from {{ cookiecutter.package_name }}.training.assembly import train
from {{ cookiecutter.package_name }}.training.batch_norm_check import check_moving_averages, has_batch_norm
from {{ cookiecutter.package_name }}.training.checkpointing import fingerprint

LAGGING = "the averages lag the weights"


def offset_examples(count, seed):
    """Four features far from 0 (mean 5, standard deviation 3): fresh moving
    averages (0 and 1) are far from their statistics. The label: the first
    feature above its mean."""
    features = 5.0 + 3.0 * np.random.default_rng(seed).standard_normal((count, 4))
    return features.astype("float32"), (features[:, 0] > 5.0).astype("int32")


def trained_normalized_model(momentum):
    """A batch normalization and a linear classifier, trained for 100 steps."""
    keras.utils.set_random_seed(1)
    model = keras.Sequential(
        [
            keras.Input((4,)),
            keras.layers.BatchNormalization(momentum=momentum),
            keras.layers.Dense(2),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.SGD(0.1),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    features, labels = offset_examples(3200, seed=0)
    model.fit(features, labels, batch_size=32, epochs=1, shuffle=False, verbose=0)
    return model


@pytest.fixture
def checked_alone(monkeypatch):
    """The check with the test's model and loss in place of the task's."""

    def per_example_loss(labels, logits):
        return keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)

    monkeypatch.setattr(batch_norm_check, "per_example_loss", per_example_loss)

    def check(model, training_loss=None):
        monkeypatch.setattr(batch_norm_check, "build_model", lambda _: clone(model))
        features, labels = offset_examples(4 * 64, seed=1)
        batches = tf.data.Dataset.from_tensor_slices((features, labels)).batch(64)
        return check_moving_averages(model, None, batches, training_loss)

    return check


def clone(model):
    """A model like `model`, of fresh weights."""
    return keras.Sequential.from_config(model.get_config())


def lag_warnings(caplog):
    records = [record for record in caplog.records if record.name == batch_norm_check.__name__]
    return [record for record in records if LAGGING in record.getMessage()]


def test_moving_averages_that_lag_the_weights_are_warned_of_in_one_line(checked_alone, caplog):
    # 100 steps at 0.999 move the averages a tenth of the way: the newcomer's
    # keras.applications backbone, held out at chance after a short run.
    losses = checked_alone(trained_normalized_model(0.999))
    assert losses["moving_averages"] >= batch_norm_check.LAG_RATIO * losses["batch_statistics"]
    [warning] = lag_warnings(caplog)
    assert warning.levelno == logging.WARNING
    assert "\n" not in warning.getMessage() and "momentum" in warning.getMessage()


def test_moving_averages_that_caught_up_are_not_warned_of(checked_alone, caplog):
    losses = checked_alone(trained_normalized_model(0.9))
    assert losses["moving_averages"] < 1.2 * losses["batch_statistics"]
    assert not lag_warnings(caplog)


def test_a_held_out_loss_within_twice_the_training_loss_is_not_warned_of(checked_alone, caplog):
    # Twice the loss with batch statistics, but not twice what training reached:
    # a loss near zero is not lagging for being twice another.
    lagging = trained_normalized_model(0.999)
    losses = checked_alone(lagging)
    caplog.clear()
    assert checked_alone(lagging, training_loss=losses["moving_averages"]) == losses
    assert not lag_warnings(caplog)


def test_a_model_without_batch_normalization_is_not_copied(monkeypatch):
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])

    def copied(_):
        raise AssertionError("copied")

    monkeypatch.setattr(batch_norm_check, "build_model", copied)
    assert check_moving_averages(model, None, [offset_examples(8, seed=1)]) is None


def test_a_run_ends_with_the_check_of_its_final_model(one_device, sgd_config, monkeypatch):
    checked = []

    def check(model, statistics, batches, training_loss=None):
        losses = check_moving_averages(model, statistics, batches, training_loss)
        checked.append((fingerprint(model.get_weights()), has_batch_norm(model), losses))
        return losses

    monkeypatch.setattr(assembly, "check_moving_averages", check)
    summary = train(sgd_config("run", 16, epochs=1, steps_per_epoch=2), one_device)
    [(final_weights, normalized, losses)] = checked
    assert final_weights == summary["weights_fingerprint"]
    # Scored where the model has batch normalization (the sample image model), and
    # only there.
    assert (losses is not None) == normalized
    assert summary["batch_norm_losses"] == losses
    assert losses is None or all(np.isfinite(loss) for loss in losses.values())
    # A rerun of the finished run trains nothing and checks nothing: a check that
    # stalled would otherwise stall every restart of a run whose model is saved.
    again = train(sgd_config("run", 16, epochs=1, steps_per_epoch=2), one_device)
    assert len(checked) == 1 and again["batch_norm_losses"] is None


def test_a_check_that_fails_is_said_in_one_line_not_raised(monkeypatch, caplog):
    # A run whose engine was handed another model (as these tests do): its
    # weights do not fit the task's model; the run has finished, and stands.
    model = keras.Sequential([keras.Input((4,)), keras.layers.BatchNormalization()])
    other = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    monkeypatch.setattr(batch_norm_check, "build_model", lambda _: other)
    assert check_moving_averages(model, None, [offset_examples(8, seed=1)]) is None
    said = [record.getMessage() for record in caplog.records]
    [said] = [line for line in said if "no check" in line]
    assert said.startswith("no check of the batch-normalization moving averages: ValueError: ")
    assert "\n" not in said
