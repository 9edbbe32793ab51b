"""gpu-smoke passes on logical CPUs, says so when no GPU is visible, and (where
there are GPUs) passes on them."""

import pytest
from conftest import REPLICAS, check_lines

# gpu-smoke runs in a fresh process, as users run it: several MirroredStrategy
# objects over the same devices in one process reuse collective keys, and a
# collective of another shape under a reused key fails ("Shape mismatch in the
# collective instance 100").


def test_gpu_smoke_on_logical_cpus(cli):
    result = cli("gpu-smoke", "--cpu-replicas", str(REPLICAS))
    checks_run = check_lines(result.stdout)
    mixed_step = "mixed-{{ "bfloat16" if cookiecutter.mixed_precision == "bfloat16" else "float16" }}"
    assert list(checks_run) == ["replicas", "all-reduce", "step", mixed_step]
    assert all(passed for passed, _ in checks_run.values()), result.stdout
    assert result.returncode == 0
    expected_sum = REPLICAS * (REPLICAS + 1) // 2
    assert checks_run["all-reduce"][1] == (
        f"replica-id all-reduce gives {expected_sum} on each of {REPLICAS} replicas"
    )


def test_gpu_smoke_without_a_gpu_says_so(cli):
    result = cli("gpu-smoke")
    assert result.returncode == 1
    assert result.stdout.startswith("FAIL gpu-visible: no GPU visible - ")


@pytest.mark.gpu
def test_gpu_smoke_on_this_machines_gpus(cli):
    result = cli("gpu-smoke", gpus=True)
    checks_run = check_lines(result.stdout)
    assert list(checks_run) == [
        "gpu-visible",
        "replicas",
        "all-reduce",
        "step",
        "placement",
        "mixed-{{ "bfloat16" if cookiecutter.mixed_precision == "bfloat16" else "float16" }}",
    ]
    assert all(passed for passed, _ in checks_run.values()), result.stdout
    assert result.returncode == 0
