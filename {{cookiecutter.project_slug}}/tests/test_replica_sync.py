"""The replicas' copies of the model are compared before every checkpoint, and
copies that drifted apart are repaired to the chief's first replica's."""

import logging

import numpy as np

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
        repaired = train(sgd_config("repaired", 32, **RUN), two_replicas)
    # Found once, by its size, named, and undone before any step trained on it.
    assert repaired["replica_repairs"] == 1
    assert np.isclose(repaired["replica_spread"], NUDGE, rtol=1e-3)
    (warning,) = [r.getMessage() for r in caplog.records if "replica copies" in r.getMessage()]
    assert warning.startswith("replica copies of 1 variable(s) differed, by up to 0.001: "), warning
    assert repaired["weights_fingerprint"] == in_sync["weights_fingerprint"]


def test_the_chiefs_copy_is_the_one_kept(two_replicas, sgd_config, monkeypatch):
    in_sync = train(sgd_config("in sync", 32, **RUN), two_replicas)
    nudging(monkeypatch, two_replicas, replica=0)
    kept = train(sgd_config("kept", 32, **RUN), two_replicas)
    assert kept["replica_repairs"] == 1
    # The nudge stayed (on every copy): the run trained on from the chief's.
    assert kept["weights_fingerprint"] != in_sync["weights_fingerprint"]


def test_a_checksum_changes_with_any_element_by_a_rounding():
    values = np.array([0.0, 1.5, -2.25], np.float32)
    assert replica_sync.checksum(values) == replica_sync.checksum(values.copy())
    assert replica_sync.checksum(values) != replica_sync.checksum(np.nextafter(values, 9))
    for dtype in ("float16", "float64", "int64"):
        assert replica_sync.checksum(values.astype(dtype)).dtype == "int64"
