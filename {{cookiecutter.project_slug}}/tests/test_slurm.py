"""The Slurm batch script: valid bash, consistent with this project{% if cookiecutter.distribution == "multi_worker" %}, and its
cluster-building step gives every task the TF_CONFIG of its node{% endif %}."""

{%- if cookiecutter.distribution == "multi_worker" %}

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from {{ cookiecutter.package_name }}.cluster import parse_tf_config
{%- else %}

import os
import re
import subprocess
import tomllib
from pathlib import Path

import pytest
{%- endif %}

ROOT = Path(__file__).resolve().parents[1]
SBATCH = ROOT / "slurm" / "train.sbatch"
SCRIPT = SBATCH.read_text(encoding="utf-8")


def sbatch_option(name):
    return re.search(rf"^#SBATCH --{name}=(\S+)$", SCRIPT, re.MULTILINE)[1]


def test_sbatch_is_valid_bash():
    subprocess.run(["bash", "-n", str(SBATCH)], check=True)


def test_sbatch_asks_for_sigterm_before_the_time_limit_and_requeues():
    assert sbatch_option("signal") == "TERM@120"
    assert re.search(r"^#SBATCH --requeue$", SCRIPT, re.MULTILINE)


def test_a_requeued_job_appends_to_the_first_attempts_log():
    # Slurm truncates the output file when a job starts again, unless asked not to.
    assert sbatch_option("output") == "%x-%j.out"
    assert sbatch_option("open-mode") == "append"


@pytest.mark.parametrize(
    "train_status, script_status, requeued",
    [(143, 0, True), (1, 1, False), (0, 0, False)],
    ids=["preempted", "failed", "finished"],
)
def test_sbatch_requeues_only_a_preempted_run(tmp_path, train_status, script_status, requeued):
    """The script under a fake srun (exiting as train would) and a fake scontrol."""
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "srun").write_text(f"#!/bin/sh\nexit {train_status}\n")
    (fake_bin / "scontrol").write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/scontrol\n')
    for tool in fake_bin.iterdir():
        tool.chmod(0o755)
    result = subprocess.run(
        ["bash", str(SBATCH)],
        env={
            **os.environ,
            "PATH": f"{fake_bin}{os.pathsep}{os.environ['PATH']}",
            "SLURM_JOB_ID": "4242",
        },
        capture_output=True,
        text=True,
    )
    assert result.returncode == script_status, result.stderr
    requeue = tmp_path / "scontrol"
    assert requeue.exists() == requeued
    if requeued:
        assert requeue.read_text() == "requeue 4242\n"


def test_sbatch_runs_this_projects_train_command():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    scripts = pyproject["project"]["scripts"]
    command = re.search(r"(\S+) train --config (\S+)", SCRIPT)
    assert command[1] in scripts
    assert (ROOT / command[2]).is_file()
{%- if cookiecutter.distribution == "multi_worker" %}


def test_cluster_step_gives_every_task_its_tf_config():
    nodes = int(sbatch_option("nodes"))
    assert sbatch_option("ntasks-per-node") == "1"  # one worker per node
    gpus = re.search(r'GPUS_PER_NODE="\$\{GPUS_PER_NODE:-(\d+)\}"', SCRIPT)[1]
    assert gpus == sbatch_option("gpus-per-node")
    step = re.search(r'TF_CONFIG="\$\((.+)\)"', SCRIPT)[1]
    fake_slurm = {
        "SLURM_STEP_NUM_TASKS": str(nodes),
        "SLURM_STEP_NODELIST": f"gpu-node[07-{7 + nodes - 1:02d}]",
        "SLURM_STEP_TASKS_PER_NODE": f"1(x{nodes})",
        "WORKER_PORT": "23456",
        "GPUS_PER_NODE": gpus,
        # `python` in the script is this environment's.
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    hosts = [f"gpu-node{7 + index:02d}:23456" for index in range(nodes)]
    for rank in range(nodes):
        result = subprocess.run(
            ["bash", "-c", step],
            env={**os.environ, **fake_slurm, "SLURM_PROCID": str(rank)},
            capture_output=True,
            text=True,
            check=True,
        )
        config = parse_tf_config(result.stdout)
        assert config == {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": rank}}
        assert json.loads(result.stdout) == config


def test_cluster_step_outside_slurm_is_one_plain_error():
    environment = {key: value for key, value in os.environ.items() if not key.startswith("SLURM_")}
    result = subprocess.run(
        [sys.executable, "-m", "{{ cookiecutter.package_name }}.cluster", "--from-slurm"],
        env=environment,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (
        "error: cannot read the Slurm job: SLURM_PROCID not found in environment."
        " Not running inside a SLURM step? - run this inside srun"
    )
{%- endif %}
