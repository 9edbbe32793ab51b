"""Slow tier: install baked projects and run their own test suites.

The 12 combinations of training_loop x distribution x keras_package, with
data_source, mixed_precision and launcher spread so every value appears.
"""

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import bake

import rules

KEYS = rules.CODE_OPTIONS
# Every supported loop x distribution x keras_package once; data_source,
# mixed_precision and launcher spread so that each value appears, and so that
# every fit/custom x keras x data combination on mirrored runs (via "both" too).
COMBINATIONS = [
    dict(zip(KEYS, values, strict=True))
    for values in (
        ("fit", "mirrored", "keras3", "synthetic", "no", "none"),
        ("fit", "mirrored", "tf_keras", "synthetic", "yes", "slurm"),
        ("fit", "multi_worker", "keras3", "synthetic", "yes", "kubernetes"),
        ("fit", "multi_worker", "tf_keras", "tfrecord", "no", "kubernetes"),
        ("custom", "mirrored", "keras3", "synthetic", "yes", "none"),
        ("custom", "mirrored", "tf_keras", "synthetic", "no", "slurm"),
        ("custom", "multi_worker", "keras3", "tfrecord", "yes", "slurm"),
        ("custom", "multi_worker", "tf_keras", "synthetic", "no", "kubernetes"),
        ("both", "mirrored", "keras3", "tfrecord", "no", "none"),
        ("both", "mirrored", "tf_keras", "tfrecord", "yes", "slurm"),
        ("both", "multi_worker", "keras3", "tfrecord", "no", "slurm"),
        ("both", "multi_worker", "tf_keras", "synthetic", "yes", "kubernetes"),
    )
]


def combination_id(options):
    return "-".join(options.values())


def test_slow_matrix_covers_every_value():
    assert all(rules.is_supported(c) for c in COMBINATIONS)
    core = {(c["training_loop"], c["distribution"], c["keras_package"]) for c in COMBINATIONS}
    assert len(core) == len(COMBINATIONS) == 12
    for name in ("data_source", "mixed_precision", "launcher"):
        assert {c[name] for c in COMBINATIONS} == set(rules.CHOICES[name]), name
    mirrored = {
        (loop, c["keras_package"], c["data_source"])
        for c in COMBINATIONS
        if c["distribution"] == "mirrored"
        for loop in (("fit", "custom") if c["training_loop"] == "both" else (c["training_loop"],))
    }
    assert len(mirrored) == 8


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
