"""`make bench` in its quick mode: it bakes, measures each task and writes its
results and chart (the figures themselves are for the README, not asserted)."""

import json
import math
import subprocess
import sys

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))

import speed  # noqa: E402

RATIOS = (
    "fit_vs_tutorial",
    "custom_vs_tutorial",
    "fit_vs_bare_fit",
    "custom_vs_overhead_free",
    "startup_20x_data",
    "input_vs_step",
    "resume_90_vs_10_percent",
)
RECIPE_RATIOS = (
    "off_repeat",
    "clipping_custom",
    "ema_custom",
    "ema_fit",
    "accumulate_2_custom",
    "accumulate_2_fit",
)
CONTENDERS = (
    "custom",
    "custom_overhead_free",
    "custom_tutorial",
    "fit",
    "bare_fit",
    "fit_tutorial",
)


def test_the_recipe_table_lists_every_feature_for_both_tasks():
    ratios = dict.fromkeys(RECIPE_RATIOS, 0.9)
    results = {"tasks": {task: {"recipe_ratios": ratios} for task in speed.TASKS}}
    lines = speed.recipe_table(results).splitlines()
    assert lines[0] == "| feature on / plain | tabular | image |"
    assert "| `accumulate_2_fit` | 0.90 | 0.90 |" in lines
    assert len(lines) == 2 + len(RECIPE_RATIOS)


def test_the_table_lists_every_ratio_with_its_target():
    ratios = dict.fromkeys(RATIOS, 1.25)
    results = {"tasks": {task: {"ratios": ratios} for task in speed.TASKS}}
    lines = speed.table(results).splitlines()
    assert lines[0] == "| ratio | tabular | image | target |"
    assert "| `custom_vs_tutorial` | 1.25 | 1.25 | >= 1.5 (tabular) |" in lines
    assert "| `fit_vs_bare_fit` | 1.25 | 1.25 | >= 1.0 |" in lines
    assert "| `input_vs_step` | 1.25 | 1.25 | - |" in lines
    assert len(lines) == 2 + len(RATIOS)


@pytest.mark.slow
@pytest.mark.parametrize(
    "tasks",
    [
        # make test measures the tabular task (and runs the recipe study, on
        # its bake); the image task's quick run, 4 minutes on 2 cores, is
        # make test-slow's.
        pytest.param(("tabular",), id="tabular"),
        pytest.param(("image",), id="image", marks=pytest.mark.extended),
    ],
)
def test_quick_bench_measures_its_tasks_and_writes_results_and_chart(tmp_path, tasks):
    out = tmp_path / "bench"
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "speed.py"), "--quick",
         "--tasks", ",".join(tasks), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert results["quick"] is True
    assert results["machine"]["versions"]["tensorflow"].startswith("2.21")
    assert list(results["tasks"]) == list(tasks)
    for task, measured in results["tasks"].items():
        assert measured["task"] == task and measured["replicas"] == 2
        assert sorted(measured["ratios"]) == sorted(RATIOS)
        for name, value in measured["ratios"].items():
            assert math.isfinite(value) and value > 0, (task, name, value)
        assert sorted(measured["examples_per_second"]) == sorted(CONTENDERS)
        assert 0 < measured["checkpoint"]["share_of_run"] < 1
        assert measured["resume_skip"]["gb"] > 0.01
        assert math.isfinite(measured["resume_skip"]["seconds_per_gb"])
        assert sorted(measured["recipe_ratios"]) == sorted(RECIPE_RATIOS)
        for name, value in measured["recipe_ratios"].items():
            assert math.isfinite(value) and value > 0, (task, name, value)
    bakes = results["bake_seconds"]
    supported = [o for o in speed.rules.code_combinations() if speed.rules.is_supported(o)]
    assert bakes["combinations"] == len(supported) and 0 < bakes["one"] < bakes["product"]
    assert (out / "ratios.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| `custom_vs_overhead_free` |" in result.stdout
    if "tabular" not in tasks:
        assert "recipe" not in results
        return
    recipe = results["recipe"]
    assert recipe["global_batch"] == {
        "adam_1x": 256, "adam_16x": 4096, "adam_16x_linear": 4096, "lamb_16x": 4096,
        "small_adam": 32,
    }
    # Adam's default rule is the square root: 4x the rate at 16x the batch, not 16x.
    rates = recipe["peak_learning_rate"]
    assert rates["adam_16x"] == pytest.approx(4 * rates["adam_1x"])
    assert rates["adam_16x_linear"] == pytest.approx(16 * rates["adam_1x"])
    assert rates["lamb_16x"] == pytest.approx(rates["adam_16x"])  # LAMB's rule is Adam's
    for name, accuracies in recipe["eval_accuracy"].items():
        assert len(accuracies) == len(recipe["seeds"])
        assert all(0 <= accuracy <= 1 for accuracy in accuracies), name
    # The defaults learn the task at the reference batch (4 classes: chance is 0.25).
    assert recipe["mean_eval_accuracy"]["adam_1x"] > 0.4
    assert "| `adam_16x_linear` | 4096 |" in result.stdout


def test_an_unknown_task_is_refused_in_one_line(capsys):
    with pytest.raises(SystemExit) as stopped:
        speed.main(["--quick", "--tasks", "tabular,text"])
    assert stopped.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.endswith("'text' is not a task - use a comma-separated subset of tabular,image")
