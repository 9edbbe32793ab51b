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

from {{ cookiecutter.package_name }}.cluster import (
    ClusterError,
    expand_hostlist,
    expand_tasks_per_node,
    parse_tf_config,
    tf_config_from_slurm,
)
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
    step = re.search(r'TF_CONFIG="\$\((.+)\)"', SCRIPT)[1]
    fake_slurm = {
        "SLURM_STEP_NUM_TASKS": str(nodes),
        "SLURM_STEP_NODELIST": f"gpu-node[07-{7 + nodes - 1:02d}]",
        "SLURM_STEP_TASKS_PER_NODE": f"1(x{nodes})",
        "WORKER_PORT": "23456",
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
    assert result.stderr.splitlines() == [
        "error: cannot read the Slurm job: SLURM_PROCID is not set - run this inside srun"
    ]
    assert "tensorflow" not in result.stderr.lower()


def test_a_task_whose_cluster_step_fails_does_not_train_alone():
    task = re.search(r"srun --kill-on-bad-exit=1 bash -c '\n(.+?)\n'", SCRIPT, re.DOTALL)[1]
    environment = {key: value for key, value in os.environ.items() if not key.startswith("SLURM_")}
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    result = subprocess.run(
        ["bash", "-c", task],
        env={**environment, "WORKER_PORT": "23456", "PATH": path},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "cannot read the Slurm job" in result.stderr


HOST_LISTS = ["gpu-node[07-09]", "n[1-2],m5,o[3-4,6,7-9]", "node[1-10]", "a1,b2", "x[001-003]"]


@pytest.mark.parametrize("nodelist", HOST_LISTS)
def test_host_lists_expand_as_tensorflows_resolver_expands_them(nodelist):
    from tensorflow.python.distribute.cluster_resolver import slurm_cluster_resolver

    assert expand_hostlist(nodelist) == slurm_cluster_resolver.expand_hostlist(nodelist)
    tasks = "2(x2),1,3(x1)"
    assert expand_tasks_per_node(tasks) == slurm_cluster_resolver.expand_tasks_per_node(tasks)


def test_host_lists_with_several_ranges_expand_in_order():
    assert expand_hostlist("r[1-2]-n[08-09],login") == [
        "r1-n08",
        "r1-n09",
        "r2-n08",
        "r2-n09",
        "login",
    ]


def slurm_step(nodelist, tasks_per_node, rank, **more):
    return {
        "SLURM_PROCID": str(rank),
        "SLURM_STEP_NODELIST": nodelist,
        "SLURM_STEP_TASKS_PER_NODE": tasks_per_node,
        **more,
    }


def test_workers_follow_slurms_node_order_and_share_a_node_by_port():
    environ = slurm_step("node[9-10],gpu1", "1,2(x2)", 4, SLURMD_NODENAME="gpu1", SLURM_LOCALID="1")
    config = tf_config_from_slurm(23456, environ)
    assert config["cluster"]["worker"] == [
        "node9:23456",
        "node10:23456",
        "node10:23457",
        "gpu1:23456",
        "gpu1:23457",
    ]
    assert config["task"] == {"type": "worker", "index": 4}


def test_tensorflows_resolver_still_sorts_host_names_as_text(monkeypatch):
    # Why cluster.py builds TF_CONFIG itself: Slurm runs task 1 of node[1-10] on
    # node2, TensorFlow's resolver calls worker 1 node10. Fails the day it is fixed.
    import tensorflow as tf

    for name, value in slurm_step("node[1-10]", "1(x10)", 1, SLURM_STEP_NUM_TASKS="10").items():
        monkeypatch.setenv(name, value)
    resolver = tf.distribute.cluster_resolver.SlurmClusterResolver(
        port_base=23456, gpus_per_node=1, auto_set_gpu=False
    )
    assert resolver.cluster_spec().as_dict()["worker"][1] == "node10:23456"
    own = tf_config_from_slurm(23456, slurm_step("node[1-10]", "1(x10)", 1))
    assert own["cluster"]["worker"][1] == "node2:23456"


@pytest.mark.parametrize(
    "environ, message",
    [
        (
            slurm_step("node[1-2]", "1(x2)", 1, SLURMD_NODENAME="node1", SLURM_LOCALID="0"),
            "task 1 runs on node1 (local task 0), but the block order of the node list puts"
            " it at node2:23456 - submit with --distribution=block (the default)",
        ),
        (slurm_step("node[2-1]", "1(x2)", 0), "not a Slurm host range: [2-1]"),
        (slurm_step("node[1-2]", "1(x3)", 0), "names 2 node(s) but SLURM_STEP_TASKS_PER_NODE"),
        (slurm_step("node[1-2]", "1(x2)", 2), "SLURM_PROCID=2 is not one of the step's 2 tasks"),
    ],
    ids=["task-elsewhere", "bad-range", "counts-mismatch", "rank-too-large"],
)
def test_a_slurm_step_that_does_not_add_up_is_refused_in_one_line(environ, message):
    with pytest.raises(ClusterError) as refused:
        tf_config_from_slurm(23456, environ)
    assert message in str(refused.value) and "\n" not in str(refused.value)
{%- endif %}
