"""`make gpu-check` in its dry run (DRY_RUN=1): every step of the one-shot GPU
check on 2 logical CPUs, so a lent GPU machine only has to run it once."""

import json
import subprocess
import sys

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_check  # noqa: E402

BENCH_RUNS = [
    "image float32 xla-off",
    "image float16 xla-off",
    "image bfloat16 xla-off",
    "tabular float32 xla-off",
    "tabular float32 xla-on",
    "tabular float16 xla-off",
    "tabular float16 xla-on",
    "tabular bfloat16 xla-off",
    "tabular bfloat16 xla-on",
]


def test_the_bench_covers_every_precision_and_xla_where_it_applies():
    runs = gpu_check.bench_runs()
    assert [name for name, _, _ in runs] == BENCH_RUNS
    flags = {name: flags for name, _, flags in runs}
    assert "--no-mixed-precision" in flags["image float32 xla-off"]
    assert "--jit-compile" in flags["tabular bfloat16 xla-on"]
    assert "--jit-compile" not in flags["tabular bfloat16 xla-off"]
    # bfloat16 runs use the project baked with mixed_precision=bfloat16.
    assert {project for name, project, _ in runs if "bfloat16" in name} == {
        ("image", "bfloat16"),
        ("tabular", "bfloat16"),
    }


# In make test-slow: make test leaves its 7 minutes out (see IN_MAKE_TEST).
@pytest.mark.slow
@pytest.mark.extended
def test_dry_run_runs_every_step_on_cpus(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "gpu_check.py"),
            "--dry-run",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["dry_run"] is True and results["failed"] == []
    steps = {step["step"]: step for step in results["steps"]}
    assert steps["install the GPU extra"]["skipped"] == "dry run"
    for precision in ("float16", "bfloat16"):
        smoke = steps[f"gpu-smoke ({precision})"]["tail"]
        verdicts = [line.split(":")[0] for line in smoke if line.startswith(("PASS", "FAIL"))]
        assert verdicts == [
            "PASS replicas",
            "PASS all-reduce",
            "PASS step",
            f"PASS mixed-{precision}",
        ]
    assert any(line.startswith("PASS sync") for line in steps["doctor"]["tail"])
    gpu_tests = "\n".join(steps["GPU tests (pytest -m gpu)"]["tail"])
    assert "SKIPPED [1] tests/test_gpu_smoke.py" in gpu_tests and "no GPU visible" in gpu_tests
    assert [row["run"] for row in results["bench"]] == BENCH_RUNS
    assert all(
        row["replicas"] == 2 and row["examples_per_second_per_replica"] > 0
        for row in results["bench"]
    )
