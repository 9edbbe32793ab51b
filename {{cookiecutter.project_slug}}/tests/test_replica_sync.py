"""The replicas' copies of the model are compared before every checkpoint, and
copies that drifted apart are repaired to the chief's first replica's."""

import logging
import os

import numpy as np
from conftest import scalars

from {{ cookiecutter.package_name }} import replica_sync
from {{ cookiecutter.package_name }}.training import train

NUDGE = 1e-3
RUN = dict(epochs=1, steps_per_epoch=4, checkpoint_every=2)


def nudging(monkeypatch, strategy, replica):
    """Before the run's first check, add NUDGE to one copy of the model's first
    variable: the copy on `replica`."""
    check = replica_sync.ReplicaSync.check
    nudged = []

    def check_after_a_nudge(self):
        if not nudged:
            self.build()
            _, value = self.mirrored[0]
            copy = strategy.experimental_local_results(value)[replica]
            copy.assign(copy + NUDGE)
            nudged.append(copy.name)
        return check(self)

    monkeypatch.setattr(replica_sync.ReplicaSync, "check", check_after_a_nudge)
    return nudged


def test_a_copy_that_drifted_is_repaired_at_the_next_checkpoint(
    two_replicas, sgd_config, monkeypatch, caplog
):
    in_sync = train(sgd_config("in sync", 32, **RUN), two_replicas)
    assert (in_sync["replica_spread"], in_sync["replica_repairs"]) == (0.0, 0)
    nudging(monkeypatch, two_replicas, replica=1)
    with caplog.at_level(logging.WARNING):
        config = sgd_config("repaired", 32, **RUN)
        repaired = train(config, two_replicas)
    # Found once, by its size, named, and undone before any step trained on it.
    assert repaired["replica_repairs"] == 1
    assert np.isclose(repaired["replica_spread"], NUDGE, rtol=1e-3)
    (warning,) = [r.getMessage() for r in caplog.records if "replica copies" in r.getMessage()]
    assert warning.startswith("replica copies of 1 variable(s) differed, by up to 0.001: "), warning
    assert repaired["weights_fingerprint"] == in_sync["weights_fingerprint"]
    # TensorBoard: the spread at each checkpoint (steps 2 and 4), 0 once repaired.
    spreads = scalars(os.path.join(config.model_dir, "logs"))["replica_spread"]
    assert [step for step, _ in spreads] == [2, 4], spreads
    assert np.isclose(spreads[0][1], NUDGE, rtol=1e-3) and spreads[1][1] == 0.0, spreads


def test_the_chiefs_copy_is_the_one_kept(two_replicas, sgd_config, monkeypatch):
    in_sync = train(sgd_config("in sync", 32, **RUN), two_replicas)
    nudging(monkeypatch, two_replicas, replica=0)
    kept = train(sgd_config("kept", 32, **RUN), two_replicas)
    assert kept["replica_repairs"] == 1
    # The nudge stayed (on every copy): the run trained on from the chief's.
    assert kept["weights_fingerprint"] != in_sync["weights_fingerprint"]


def test_a_checksum_changes_with_any_element_by_a_rounding():
    values = np.array([0.0, 1.5, -2.25, 3.0], np.float32)
    assert replica_sync.checksum(values) == replica_sync.checksum(values.copy())
    assert replica_sync.checksum(values) != replica_sync.checksum(np.nextafter(values, 9))
    # One element a rounding up, another a rounding down: their bits' plain sum
    # is unchanged.
    up_and_down = values.copy()
    up_and_down[1] = np.nextafter(values[1], np.float32(9))
    up_and_down[3] = np.nextafter(values[3], np.float32(0))
    assert replica_sync.checksum(values) != replica_sync.checksum(up_and_down)
    for dtype in ("float16", "float64", "int64"):
        assert replica_sync.checksum(values.astype(dtype)).dtype == "int64"
