"""The training data's statistics (task.summarize_batch / statistics_from): added
up the same however the data is batched, stored with the run by its first start,
and what every later start and the export build the model with; never a NaN."""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
from conftest import LOOPS, assert_same_statistics

from {{ cookiecutter.package_name }} import task
from {{ cookiecutter.package_name }}.data import statistics
from {{ cookiecutter.package_name }}.data.pipeline import ArraySource
from {{ cookiecutter.package_name }}.export import trained_model
from {{ cookiecutter.package_name }}.task import sample_examples
from {{ cookiecutter.package_name }}.training.assembly import plan_run, train


def test_the_sums_do_not_depend_on_how_the_data_is_batched():
    source = ArraySource(*sample_examples(300, seed=5))
    inputs, labels = source.parse(np.arange(300))
    whole = task.statistics_from(statistics.summarize([(inputs, labels)]))
    batched = statistics.summarize(
        (rows(inputs, i, i + 7), labels[i : i + 7]) for i in range(0, 300, 7)
    )
    assert_same_statistics(task.statistics_from(batched), whole)
    assert_same_statistics(source.statistics(), whole)
    # A summary of only part of the data is a different one: the check can fail.
    part = task.statistics_from(statistics.summarize([(rows(inputs, 0, 100), labels[:100])]))
    with pytest.raises(AssertionError):
        assert_same_statistics(part, whole)


def rows(inputs, start, end):
    """Rows `start` to `end` of a batch of inputs (a dict of them too)."""
    return tf.nest.map_structure(lambda values: values[start:end], inputs)


def recording_builds(monkeypatch):
    """The statistics each model the engines and the export build gets, in order."""
    seen = []

    def build_model(learned):
        seen.append(learned)
        return task.build_model(learned)

    for module in [*(f"training.engine_{loop}" for loop in LOOPS), "export"]:
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
    assert_same_statistics(stored, expected, rtol=0)

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
        assert_same_statistics(learned, doubled(stored), rtol=0)


def test_export_without_the_runs_statistics_names_the_file(one_device, sgd_config):
    config = sgd_config("lost", 16, epochs=1, steps_per_epoch=1)
    train(config, one_device)
    os.remove(os.path.join(config.model_dir, statistics.STATISTICS_NAME))
    with pytest.raises(statistics.StatisticsError, match="has no statistics.json"):
        trained_model(config.model_dir)


def test_a_fresh_run_takes_the_datas_statistics_over_an_earlier_runs(one_device, sgd_config):
    # An earlier run's statistics, whose checkpoints were deleted to start over
    # (perhaps after the data was indexed again), are not this run's.
    config = sgd_config("restarted", 16, epochs=1, steps_per_epoch=1)
    expected = plan_run(config, one_device).train.statistics()
    train(config, one_device)
    path = os.path.join(config.model_dir, statistics.STATISTICS_NAME)
    with open(path) as handle:
        stale = doubled(json.load(handle))
    with open(path, "w") as handle:
        json.dump(stale, handle)
    shutil.rmtree(os.path.join(config.model_dir, "checkpoints"))
    train(config, one_device)
    with open(path) as handle:  # what the resumes and the export build with
        assert_same_statistics(json.load(handle), expected, rtol=0)


def test_statistics_that_are_not_finite_are_refused_in_one_line(tmp_path):
    learned = {"mean": [0.5, float("nan")], "variance": [1.0, 1.0]}
    refused = r"^the data's hold nan in 'mean': a value in the training data is not finite - fix$"
    with pytest.raises(statistics.StatisticsError, match=refused):
        statistics.check_finite(learned, "the data's", "fix")
    path = tmp_path / statistics.STATISTICS_NAME
    path.write_text(json.dumps(learned))  # JSON's NaN
    stored = rf"^{path} hold nan in 'mean': .* - train in a new --model-dir, from data whose"
    with pytest.raises(statistics.StatisticsError, match=stored):
        statistics.load(str(tmp_path))
    assert statistics.check_finite({"vocabulary": ["a", "b"], "mean": [1.0]}, "x", "fix")


def test_value_counts_are_exact_until_they_would_fill_the_memory(monkeypatch):
    monkeypatch.setattr(statistics, "MAX_COUNTED_VALUES", 3)
    batches = [
        {"values": {"a": 5, "b": 1}},
        {"values": {"c": 2, "d": 1, "a": 1}},
        {"values": {"e": 1}},
    ]
    # 5 distinct values, within twice 3: every count exact.
    assert statistics.add_all(batches)["values"] == {"a": 6, "b": 1, "c": 2, "d": 1, "e": 1}
    # Two more: the 3 most frequent kept (ties in value order), not all 7.
    more = [*batches, {"values": {"f": 1, "g": 3}}]
    assert statistics.add_all(more)["values"] == {"a": 6, "g": 3, "c": 2}
