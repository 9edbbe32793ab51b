"""The Slurm batch script: valid bash, consistent with this project, requeued
as docs/clusters.md's restart policy says (run under stand-ins for srun and scontrol){% if cookiecutter.distribution == "multi_worker" %}, and
its cluster-building step gives every task the TF_CONFIG of its node{% endif %}."""

{%- if cookiecutter.distribution == "multi_worker" %}

import json
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from {{ cookiecutter.package_name }}.distribute.cluster import (
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
PROJECT_COMMAND = "{{ cookiecutter.project_slug }}"
TASKS = {{ 2 if cookiecutter.distribution == "multi_worker" else 1 }}


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


# Stand-ins for what the batch script runs: srun runs its command once per task and
# exits as srun does when no task was killed (the highest exit status); the project's
# command exits with its task's status from TASK_STATUSES; scontrol notes the requeue.
STAND_INS = {
    "srun": """
while [ "${1#-}" != "$1" ]; do shift; done
highest=0
for rank in $(seq 0 $((TASKS - 1))); do
  SLURM_PROCID=$rank "$@"
  code=$?
  if [ "$code" -gt "$highest" ]; then highest=$code; fi
done
exit "$highest"
""",
    PROJECT_COMMAND: 'set -- $TASK_STATUSES; shift "$SLURM_PROCID"; exit "$1"',
    "scontrol": 'echo "$@" >> "$REQUEUES"',
    "python": "echo '{}'",
}


@pytest.fixture
def job(tmp_path):
    """A job's attempts: each call runs the batch script as Slurm starts the job and
    every requeue of it (the same job ID, in the submission directory) while its
    tasks exit with `statuses`, and returns (exit status, requeued, output lines)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, script in STAND_INS.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{script}\n")
        (bin_dir / name).chmod(0o755)
    requeues = tmp_path / "requeues"
    requeues.touch()

    def attempt(*statuses, **environment):
        before = requeues.read_text()
        result = subprocess.run(
            ["bash", str(SBATCH)],
            cwd=tmp_path,
            env={
                **os.environ,
                "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
                "SLURM_JOB_ID": "4242",
                "TASKS": str(TASKS),
                "TASK_STATUSES": " ".join(map(str, statuses)),
                "REQUEUES": str(requeues),
                **environment,
            },
            capture_output=True,
            text=True,
            timeout=60,
        )
        requeued = requeues.read_text()[len(before) :]
        assert requeued in ("", f"requeue {environment.get('SLURM_JOB_ID', '4242')}\n"), requeued
        return result.returncode, bool(requeued), result.stdout.splitlines()

    return attempt


def ended_by(status):
    """Every task's status when one task ends with `status` and{% if cookiecutter.distribution == "multi_worker" %} the others, which
    lost it as a peer, exit 143{% else %} there is no other{% endif %}."""
    return (status,) + (143 if status else 0,) * (TASKS - 1)


def test_a_finished_run_is_not_requeued(job):
    assert job(*ended_by(0)) == (0, False, [])


def test_a_preemption_is_requeued_every_time_and_not_counted(job):
    for _ in range(6):
        status, requeued, [line] = job(*ended_by(143))
        assert (status, requeued) == (0, True)
        assert line.startswith("train.sbatch: exit 143 (preempted (saved, or nothing to save)")
        # The default limit is an outer bound: the trainer budgets by progress.
        assert line.endswith("requeued; not counted, 20 of MAX_RETRIES=20 retries left")


@pytest.mark.parametrize(
    "cause, why",
    [
        (142, "stalled"),
        (137, "killed by SIGKILL"),
        (139, "killed by SIGSEGV"),
        (253, "out of memory"),
    ],
    ids=["stall", "sigkill", "segfault", "srun-oom"],
)
def test_a_stall_or_a_kill_is_requeued_max_retries_times_then_ends_the_job(job, cause, why):
    for left in (2, 1, 0):
        status, requeued, [line] = job(*ended_by(cause), MAX_RETRIES="3")
        assert (status, requeued) == (0, True)
        assert line.startswith(f"train.sbatch: exit {cause} ({why}")
        assert line.endswith(f"requeued, {left} of MAX_RETRIES=3 retries left")
    status, requeued, [line] = job(*ended_by(cause), MAX_RETRIES="3")
    assert (status, requeued) == (cause, False)
    assert line.endswith("not requeued, all MAX_RETRIES=3 retries used")


def test_preemptions_in_between_do_not_give_a_stall_more_retries(job):
    steps = [(142, 0, True), (143, 0, True), (143, 0, True), (142, 0, True), (142, 142, False)]
    for cause, status, requeued in steps:
        assert job(*ended_by(cause), MAX_RETRIES="2")[:2] == (status, requeued), cause
    # MAX_RETRIES=0: no retry at all.
    assert job(*ended_by(142), SLURM_JOB_ID="4343", MAX_RETRIES="0")[:2] == (142, False)


@pytest.mark.parametrize("cause", [1, 2], ids=["error", "bad-input"])
def test_an_error_or_bad_input_ends_the_job_at_once(job, cause):
    status, requeued, [line] = job(*ended_by(cause))
    assert (status, requeued) == (cause, False)
    assert line.startswith(f"train.sbatch: exit {cause} (")
    assert line.endswith("not requeued, a rerun would fail the same way")


def test_a_max_retries_that_is_not_a_number_stops_the_job_before_it_trains(job, tmp_path):
    status, requeued, lines = job(*ended_by(143), MAX_RETRIES="three")
    assert (status, requeued, lines) == (2, False, [])
    assert not (tmp_path / "runs").exists()  # the run never started
{%- if cookiecutter.distribution == "multi_worker" %}


def test_a_task_records_how_it_ended_after_slurms_sigterm(tmp_path):
    # Slurm signals every process of the step: the task's shell must wait for train
    # to save and exit, then record its status (what the batch script acts on).
    task = re.search(r"srun --kill-on-bad-exit=1 bash -c '\n(.+?)\n'", SCRIPT, re.DOTALL)[1]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    saving = "trap 'sleep 0.5; exit 143' TERM; touch started; while :; do sleep 0.05; done"
    for name, script in (("python", "echo '{}'"), (PROJECT_COMMAND, saving)):
        (bin_dir / name).write_text(f"#!/bin/bash\n{script}\n")
        (bin_dir / name).chmod(0o755)
    (tmp_path / "runs" / "4242").mkdir(parents=True)
    environment = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "SLURM_JOB_ID": "4242",
        "SLURM_PROCID": "1",
    }
    process = subprocess.Popen(
        ["bash", "-c", task], cwd=tmp_path, env=environment, start_new_session=True
    )
    deadline = time.monotonic() + 30
    while not (tmp_path / "started").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGTERM)
    assert process.wait(timeout=30) == 143
    assert (tmp_path / "runs" / "4242" / "task-1.status").read_text() == "143\n"


@pytest.mark.parametrize(
    "statuses, cause",
    [((143, 142), 142), ((1, 143), 1), ((142, 2), 2), ((139, 143), 139), ((143, 143), 143)],
    ids=["stall", "error", "bad-input-over-stall", "crash", "preempted"],
)
def test_the_job_acts_on_the_cause_not_on_the_peers_that_lost_it(job, statuses, cause):
    # srun reports the highest status: 143 for a stall or an error on one worker.
    status, requeued, [line] = job(*statuses)
    assert line.startswith(f"train.sbatch: exit {cause} (")
    assert requeued == (cause not in (1, 2))
    # A new attempt starts from no recorded status: a preemption now is one.
    assert job(143, 143)[:2] == (0, True)
{%- endif %}


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
        [sys.executable, "-m", "{{ cookiecutter.package_name }}.distribute.cluster", "--from-slurm"],
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
    # Why distribute/cluster.py builds TF_CONFIG itself: Slurm runs task 1 of node[1-10] on
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
