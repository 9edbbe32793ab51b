"""The training data's statistics (task.summarize_batch / statistics_from): added
up the same however the data is batched, stored with the run by its first start,
and what every later start and the export build the model with."""

import json
import os

import numpy as np
import pytest
from conftest import LOOPS

from {{ cookiecutter.package_name }} import statistics, task
from {{ cookiecutter.package_name }}.data import ArraySource
from {{ cookiecutter.package_name }}.export import trained_model
from {{ cookiecutter.package_name }}.task import sample_examples
from {{ cookiecutter.package_name }}.training import plan_run, train


def assert_same(found, expected, rtol=1e-9):
    """Statistics (nested lists and numbers) equal to within float rounding."""
    assert found.keys() == expected.keys()
    for key in expected:
        np.testing.assert_allclose(found[key], expected[key], rtol=rtol, err_msg=key)


def test_the_sums_do_not_depend_on_how_the_data_is_batched():
    source = ArraySource(*sample_examples(300, seed=5))
    inputs, labels = source.parse(np.arange(300))
    whole = task.statistics_from(statistics.summarize([(inputs, labels)]))
    batched = statistics.summarize((inputs[i : i + 7], labels[i : i + 7]) for i in range(0, 300, 7))
    assert_same(task.statistics_from(batched), whole)
    assert_same(source.statistics(), whole)
    # A summary of only part of the data is a different one: the check can fail.
    part = task.statistics_from(statistics.summarize([(inputs[:100], labels[:100])]))
    assert any(not np.allclose(part[key], whole[key]) for key in whole)


def recording_builds(monkeypatch):
    """The statistics each model the engines and the export build gets, in order."""
    seen = []

    def build_model(learned):
        seen.append(learned)
        return task.build_model(learned)

    for module in [*(f"engine_{loop}" for loop in LOOPS), "export"]:
        monkeypatch.setattr(f"{{ cookiecutter.package_name }}.{module}.build_model", build_model)
    return seen


def doubled(value):
    """Every number in nested lists and dicts, times 2: other, still valid, statistics."""
    if isinstance(value, dict):
        return {key: doubled(item) for key, item in value.items()}
    if isinstance(value, list):
        return [doubled(item) for item in value]
    return 2 * value


def test_a_run_stores_its_statistics_and_its_later_starts_and_export_use_those(
    one_device, sgd_config, monkeypatch
):
    config = sgd_config("stored", 16, epochs=1, steps_per_epoch=2)
    expected = plan_run(config, one_device).train.statistics()
    train(config, one_device)
    path = os.path.join(config.model_dir, statistics.STATISTICS_NAME)
    with open(path) as handle:
        stored = json.load(handle)
    assert_same(stored, expected, rtol=0)

    # The run's statistics, not the data's (which may have changed since): the
    # resumed run and the export build with what the file says, and asking the
    # data would fail here.
    with open(path, "w") as handle:
        json.dump(doubled(stored), handle)

    def changed_data(source):
        raise AssertionError("a resumed run asked the data for its statistics")

    plan = plan_run(config, one_device)
    for source in (plan.train, plan.evaluation):
        monkeypatch.setattr(type(source), "statistics", changed_data)
    builds = recording_builds(monkeypatch)
    config.epochs = 2
    train(config, one_device)
    trained_model(config.model_dir)
    assert len(builds) == 2
    for learned in builds:
        assert_same(learned, doubled(stored), rtol=0)


def test_export_without_the_runs_statistics_names_the_file(one_device, sgd_config):
    config = sgd_config("lost", 16, epochs=1, steps_per_epoch=1)
    train(config, one_device)
    os.remove(os.path.join(config.model_dir, statistics.STATISTICS_NAME))
    with pytest.raises(statistics.StatisticsError, match="has no statistics.json"):
        trained_model(config.model_dir)
