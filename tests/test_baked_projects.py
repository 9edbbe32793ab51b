"""Slow tier: install baked projects and run their own test suites.

The 10 supported combinations of training_loop x distribution x keras_package,
with data_source, mixed_precision and launcher spread so every value appears.
"""

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import bake

import rules

SPREAD = [
    # (data_source, mixed_precision, launcher) per supported core combination
    ("synthetic", "no", "none"),
    ("tfrecord", "yes", "slurm"),
    ("synthetic", "yes", "kubernetes"),
    ("tfrecord", "no", "none"),
    ("tfrecord", "no", "slurm"),
]


def slow_combinations():
    core = [
        {"training_loop": loop, "distribution": distribution, "keras_package": keras}
        for loop in rules.CHOICES["training_loop"]
        for distribution in rules.CHOICES["distribution"]
        for keras in rules.CHOICES["keras_package"]
    ]
    chosen = []
    for index, options in enumerate(c for c in core if rules.is_supported(c)):
        data, mixed, launcher = SPREAD[index % len(SPREAD)]
        if launcher == "kubernetes" and options["distribution"] == "mirrored":
            launcher = "slurm"
        options.update(data_source=data, mixed_precision=mixed, launcher=launcher)
        chosen.append(options)
    return chosen


COMBINATIONS = slow_combinations()


def combination_id(options):
    return "-".join(options.values())


def test_slow_matrix_covers_every_value():
    assert len(COMBINATIONS) == 10
    assert all(rules.is_supported(c) for c in COMBINATIONS)
    for name in ("data_source", "mixed_precision", "launcher"):
        assert {c[name] for c in COMBINATIONS} == set(rules.CHOICES[name]), name


@pytest.mark.slow
@pytest.mark.parametrize("options", COMBINATIONS, ids=combination_id)
def test_baked_project_passes_its_own_tests(cookies, options):
    # Each under its own name, so the editable installs do not replace each other.
    name = "slow " + combination_id(options).replace("_", " ").replace("-", " ")
    result = bake(cookies, project_name=name, **options)
    assert result.exit_code == 0, result.exception
    project = Path(result.project_path)
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
         "--no-build-isolation", "-e", str(project)],
        capture_output=True,
        text=True,
    )
    assert install.returncode == 0, install.stderr
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert tests.returncode == 0, tests.stdout[-6000:] + tests.stderr[-3000:]
    assert " passed" in tests.stdout.splitlines()[-1]
