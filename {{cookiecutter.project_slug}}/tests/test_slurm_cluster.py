"""The batch script on a real Slurm: a one-node cluster (slurmctld, slurmd and munge),
started here when it can be (root, and Debian's slurm-wlm and munge installed or
installable), {% if cookiecutter.distribution == "multi_worker" %}two tasks on the node standing for two nodes{% else %}one task on the node{% endif %}. `slurm/train.sbatch`
is submitted unchanged: only sbatch's command line and the config file differ.

Marker `slurm`: left out of `make test`; `make test-slurm` runs these.
"""

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
{% if cookiecutter.data_source == "tfrecord" %}
from {{ cookiecutter.package_name }}.data.sources import make_data
{%- endif %}
from {{ cookiecutter.package_name }}.distribute.startup import NATIVE_STARTUP_NOISE

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parents[1]
SBATCH = ROOT / "slurm" / "train.sbatch"
TASKS = {{ 2 if cookiecutter.distribution == "multi_worker" else 1 }}
# Small enough for 2 CPU cores: 2 epochs of 64 steps, a checkpoint every 8.
CONFIG = """\
epochs = 2
steps_per_epoch = 64
checkpoint_every = 8
steps_per_call = 2
per_replica_batch_size = 32
{%- if cookiecutter.data_source == "tfrecord" %}
data_dir = "data"
{%- endif %}
"""
JOB_SECONDS = 900
SLURM_CONF = """\
ClusterName=local
SlurmctldHost={host}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
JobRequeue=1
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
NodeName={host} CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
"""


def run(*command, timeout=120):
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


def slurm_answers():
    return shutil.which("sinfo") is not None and run("sinfo", "-h").returncode == 0


def start_slurm():
    """Start a one-node Slurm here, or return why it cannot be (the skip reason)."""
    if os.geteuid() != 0:
        return "no Slurm answers here, and starting one needs root"
    if not shutil.which("slurmctld"):
        if not shutil.which("apt-get"):
            return "no Slurm answers here, and there is no apt-get to install slurm-wlm"
        install = ["apt-get", "install", "-y", "--no-install-recommends", "slurm-wlm", "munge"]
        installed = run(*install, timeout=900)
        if installed.returncode != 0:
            return f"apt-get could not install slurm-wlm and munge: {installed.stderr[-300:]}"
    conf = Path("/etc/slurm/slurm.conf")
    if not conf.exists():
        conf.parent.mkdir(parents=True, exist_ok=True)
        conf.write_text(SLURM_CONF.format(host=socket.gethostname(), cpus=os.cpu_count()))
    for folder in ("/var/spool/slurmctld", "/var/spool/slurmd", "/var/log/slurm", "/run/munge"):
        Path(folder).mkdir(parents=True, exist_ok=True)
    shutil.chown("/run/munge", "munge", "munge")
    for daemon in (["munged", "--force"], ["slurmctld"], ["slurmd"]):
        started = run(*daemon)
        if started.returncode != 0:
            return f"{daemon[0]} did not start: {started.stderr[-300:]}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if slurm_answers() and "idle" in run("sinfo", "-h", "-o", "%t").stdout:
            return None
        time.sleep(1)
    return "the one-node Slurm started here did not come up within 60 s"


@pytest.fixture(scope="module")
def slurm():
    if not slurm_answers():
        reason = start_slurm()
        if reason:
            pytest.skip(reason)


@pytest.fixture
def workdir(tmp_path):
    """Where the jobs are submitted from: the small config, and the output files."""
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "default.toml").write_text(CONFIG)
{%- if cookiecutter.data_source == "tfrecord" %}
    make_data(tmp_path / "data", num_files=4, examples=4096)
{%- endif %}
    return tmp_path


def submit(workdir):
    """Submit the batch script as it is; the node's CPUs stand for the GPUs."""
    environment = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    submitted = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--nodes=1",
            f"--ntasks-per-node={TASKS}",
            "--gpus-per-node=0",
            str(SBATCH),
        ],
        cwd=workdir,
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    )
    return submitted.stdout.strip().split(";")[0]


def job_field(job_id, name):
    shown = run("scontrol", "show", "job", job_id).stdout
    found = re.search(rf"\b{name}=(\S+)", shown)
    return found[1] if found else None


def wait_for(condition, what, seconds=JOB_SECONDS):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(1)
    pytest.fail(f"{what} did not happen within {seconds} s")


def finished(job_id):
    return job_field(job_id, "JobState") in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")


def output_of(workdir, job_id):
    path = workdir / f"{{ cookiecutter.project_slug }}-{job_id}.out"
    return path.read_text(errors="replace") if path.exists() else ""


def fingerprint(text):
    return re.findall(r"final weights fingerprint: (\S+)", text)


def test_a_job_trains_and_a_preempted_one_requeues_and_resumes_to_the_same_weights(slurm, workdir):
    uninterrupted = submit(workdir)
    wait_for(lambda: finished(uninterrupted), f"job {uninterrupted} finishing")
    reference = output_of(workdir, uninterrupted)
    assert job_field(uninterrupted, "JobState") == "COMPLETED", reference[-3000:]
    assert len(fingerprint(reference)) == 1, reference[-3000:]
    assert f"replicas: {TASKS}" in reference

    preempted = submit(workdir)
    # Mid-epoch: after the second checkpoint of the first epoch.
    wait_for(
        lambda: "checkpoint: epoch 0 step 8 " in output_of(workdir, preempted),
        f"job {preempted} saving epoch 0 step 8",
    )
    # What Slurm sends before the time limit or on preemption: SIGTERM to the steps.
    run("scancel", "--signal=TERM", preempted)
    wait_for(lambda: job_field(preempted, "Restarts") == "1", f"job {preempted} requeued")
    wait_for(lambda: finished(preempted), f"job {preempted} finishing after its requeue")
    text = output_of(workdir, preempted)
    assert job_field(preempted, "JobState") == "COMPLETED", text[-3000:]
    saved = re.findall(r"preempted: saved epoch (\d+) step (\d+)", text)
    assert len(saved) == 1, text[-3000:]
    epoch, step = saved[0]
    assert int(step) > 0, "the SIGTERM came mid-epoch: the resume is mid-epoch too"
    # Both attempts in the one output file (--open-mode=append), the same job ID.
    assert text.count("starting fresh") == 1
    assert f"resumed from epoch {epoch} step {step}" in text
{%- if cookiecutter.distribution == "multi_worker" %}
    # The other worker saved the same step (its log is in the model directory).
    worker_log = (workdir / "runs" / preempted / "worker-1.log").read_text()
    assert f"preempted: saved epoch {epoch} step {step}" in worker_log
{%- endif %}
    assert fingerprint(text) == fingerprint(reference)
    noise = [line for line in text.splitlines() if NATIVE_STARTUP_NOISE.search(line)]
    assert not noise, noise[:3]
{%- if cookiecutter.distribution == "multi_worker" %}
    # Both attempts ended on both workers at once (strategy.finish_together): no
    # "task:1 unhealthy ... The tasks have crashed" from the coordination service.
    for output in (reference, text):
        crashed = [line for line in output.splitlines() if "StartAbort" in line]
        assert not crashed, crashed[:3]
{%- endif %}
