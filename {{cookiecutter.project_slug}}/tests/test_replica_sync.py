"""The replicas' copies of the model are compared before every checkpoint, and
copies that drifted apart are repaired to the chief's first replica's."""

import logging
import os

import numpy as np
import pytest
import tensorflow as tf
from conftest import sample_statistics, scalars, with_every_engine_model

from {{ cookiecutter.package_name }}.distribute.compat import keras, tf_variable
from {{ cookiecutter.package_name }}.task import build_model
from {{ cookiecutter.package_name }}.training import replica_sync
from {{ cookiecutter.package_name }}.training.assembly import train

NUDGE = 1e-3
RUN = dict(epochs=1, steps_per_epoch=4, checkpoint_every=2)


def nudging(monkeypatch, strategy, replica):
    """Before the run's first check, add NUDGE to one copy of the model's first
    variable: the copy on `replica`. Returns a list that gets its name."""
    check = replica_sync.ReplicaSync.check
    nudged = []

    def check_after_a_nudge(self):
        if not nudged:
            self.build()
            name, value = self.mirrored[0]
            copy = strategy.experimental_local_results(value)[replica]
            copy.assign(copy + NUDGE)
            nudged.append(name)
        return check(self)

    monkeypatch.setattr(replica_sync.ReplicaSync, "check", check_after_a_nudge)
    return nudged


def test_a_copy_that_drifted_is_repaired_to_the_chiefs_at_the_next_checkpoint(
    two_replicas, sgd_config, monkeypatch, caplog
):
    in_sync = train(sgd_config("in sync", 32, **RUN), two_replicas)
    assert (in_sync["replica_spread"], in_sync["replica_repairs"]) == (0.0, 0)

    # The second replica's copy nudged: found once, by its size, named, and
    # undone before any step trained on it.
    with monkeypatch.context() as patch, caplog.at_level(logging.WARNING):
        nudged = nudging(patch, two_replicas, replica=1)
        config = sgd_config("repaired", 32, **RUN)
        repaired = train(config, two_replicas)
    assert repaired["replica_repairs"] == 1
    assert np.isclose(repaired["replica_spread"], NUDGE, rtol=1e-3)
    (warning,) = [r.getMessage() for r in caplog.records if "replica copies" in r.getMessage()]
    found = f"replica copies of 1 variable(s) differed, by up to 0.001: {nudged[0]} (0.001)"
    assert warning.startswith(found), warning
    assert repaired["weights_fingerprint"] == in_sync["weights_fingerprint"]
    # TensorBoard: the spread at each checkpoint (steps 2 and 4), 0 once repaired.
    spreads = scalars(os.path.join(config.model_dir, "logs"))["replica_spread"]
    assert [step for step, _ in spreads] == [2, 4], spreads
    assert np.isclose(spreads[0][1], NUDGE, rtol=1e-3) and spreads[1][1] == 0.0, spreads

    # The chief's first copy nudged: that one is kept, on every copy, and the
    # run trains on from it. Repaired once: the second checkpoint's check found
    # every copy equal.
    nudging(monkeypatch, two_replicas, replica=0)
    kept = train(sgd_config("kept", 32, **RUN), two_replicas)
    assert kept["replica_repairs"] == 1
    assert kept["weights_fingerprint"] != in_sync["weights_fingerprint"]


def changes_with_any_element(values):
    """Whether the checksum of `values` changes when any one element is a
    rounding larger."""
    unchanged = replica_sync.checksum(values)
    for index in range(len(values)):
        changed = values.copy()
        changed[index] = np.nextafter(values[index], np.float32(9))
        if replica_sync.checksum(changed) == unchanged:
            return False
    return True


@pytest.mark.parametrize("piece", [2**22, 2], ids=["one piece", "pieces of 2"])
def test_a_checksum_changes_with_any_element_by_a_rounding(monkeypatch, piece):
    monkeypatch.setattr(replica_sync, "PIECE", piece)
    values = np.array([1.5, 2.5, 3.5, 4.5, -2.25, 0.0, 3.0], np.float32)
    assert replica_sync.checksum(values) == replica_sync.checksum(values.copy())
    assert changes_with_any_element(values)
    # Roundings up and down that cancel in a plain sum of the bits, and in one
    # weighted by position (positions 0 + 3 = 1 + 2).
    up_down_down_up = values.copy()
    for index, towards in zip(range(4), (9, -9, -9, 9), strict=True):
        up_down_down_up[index] = np.nextafter(values[index], np.float32(towards))
    assert replica_sync.checksum(values) != replica_sync.checksum(up_down_down_up)
    for dtype in ("float16", "float64", "int64"):
        assert replica_sync.checksum(values.astype(dtype)).dtype == "int64"


def with_per_replica_batch_norm(model):
    """`model` with a BatchNormalization of per-replica statistics on its output."""
    normalized = keras.layers.BatchNormalization(synchronized=False)(model.outputs[0])
    return keras.Model(model.inputs, normalized)


def test_per_replica_batch_norm_statistics_are_named_once_and_not_counted_as_drift(
    two_replicas, sgd_config, monkeypatch, caplog
):
    with_every_engine_model(monkeypatch, with_per_replica_batch_norm)
    with caplog.at_level(logging.WARNING):
        summary = train(sgd_config("per-replica statistics", 32, **RUN), two_replicas)
    assert (summary["replica_spread"], summary["replica_repairs"]) == (0.0, 0)
    messages = [record.getMessage() for record in caplog.records]
    named = [message for message in messages if "keep per-replica statistics" in message]
    # Keras 3 mirrors the statistics (each replica writes its own copy); tf_keras
    # keeps them per replica, summed on read (nothing to compare).
    with two_replicas.scope():
        layer = with_per_replica_batch_norm(build_model(sample_statistics())).layers[-1]
    mirrored = tf_variable(layer.moving_mean).synchronization != tf.VariableSynchronization.ON_READ
    assert len(named) == (1 if mirrored else 0), named
    if mirrored:
        assert "BatchNormalization(synchronized=True)" in named[0], named[0]
