"""Several local workers: the launcher, MultiWorkerMirroredStrategy, chief-only
checkpoints and resume. Each worker is a fresh process with its own TF_CONFIG."""

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import pytest
import tensorflow as tf
from conftest import (
    LOOPS,
    REPLICAS,
    assert_losses_alike,
    assert_trained_alike,
    read_json,
    run_cli,
{%- if cookiecutter.data_source == "tfrecord" %}
    write_shards,
{%- endif %}
)

from {{ cookiecutter.package_name }}.checks import doctor
from {{ cookiecutter.package_name }}.config import TrainConfig
{%- if cookiecutter.data_source == "tfrecord" %}
from {{ cookiecutter.package_name }}.data.sources import make_data
{%- endif %}
from {{ cookiecutter.package_name }}.distribute.launch import (
    LaunchError,
    free_ports,
{%- if cookiecutter.keras_package == "keras3" %}
    launch,
{%- endif %}
    retry_status,
    worker_environment,
    worker_gpus,
    worker_tf_configs,
)
from {{ cookiecutter.package_name }}.training.assembly import train

WORKERS = 2
FINGERPRINT = re.compile(r"^final weights fingerprint: (\w+)$", re.MULTILINE)
SCRATCH = re.compile(r"^worker 1 writes its copies of checkpoints to (\S+)$", re.MULTILINE)
{%- if cookiecutter.data_source == "tfrecord" %}


@pytest.fixture(scope="module")
def one_file_data_dir(tmp_path_factory):
    """One training file: fewer files than workers means DATA sharding, so 2 workers
    see the same global batches as one process (whole files per worker would not)."""
    path = tmp_path_factory.mktemp("one-file")
    make_data(path, num_files=1, examples=1024)
    return path
{%- endif %}


def train_flags(model_dir, loop, *extra):
    # fmt: off
    flags = [
        "--model-dir", str(model_dir),
        "--optimizer", "sgd",
{%- if cookiecutter.task == "image" %}
        "--learning-rate", "0.001",  # as conftest.sgd_config (batch normalization)
{%- else %}
        "--learning-rate", "0.05",
{%- endif %}
        "--per-replica-batch-size", "64",
        # conftest.sgd_config's recipe: plain SGD at a constant rate for 128.
        "--momentum", "0", "--reference-batch-size", "128",
        "--warmup-steps", "0", "--lr-schedule", "constant",
{%- if cookiecutter.mixed_precision != "no" %}
        "--no-mixed-precision",
{%- endif %}
{%- if cookiecutter.training_loop == "both" %}
        "--loop", loop,
{%- endif %}
    ]
    # fmt: on
    return [*flags, *extra]


def launched(cli, *command):
    result = cli("launch", "--workers", str(WORKERS), "--", *command)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def worker_logs(output, model_dir):
    """Every worker's log {index: text}: the chief's lines from the launcher's
    output, each other worker's from its file in the model directory."""
    lines = output.splitlines(keepends=True)
    logs = {0: "".join(line[11:] for line in lines if line.startswith("[worker 0] "))}
    for index in range(1, WORKERS):
        logs[index] = (Path(model_dir) / f"worker-{index}.log").read_text()
    return logs


def one_fingerprint(output, model_dir):
    """The final weights' fingerprint, the same on every worker (the last run's)."""
    logs = worker_logs(output, model_dir)
    found = {index: FINGERPRINT.findall(text)[-1:] for index, text in logs.items()}
    assert len({tuple(value) for value in found.values()}) == 1, f"workers differ: {found}"
    assert found[0], "no worker printed its fingerprint"
    return found[0][0]


@pytest.mark.parametrize("loop", LOOPS)
def test_two_workers_train_like_two_replicas_in_one_process(
    cli, tmp_path, two_replicas, sgd_config, loop{% if cookiecutter.data_source == "tfrecord" %}, one_file_data_dir{% endif %}
):
    data = [{% if cookiecutter.data_source == "tfrecord" %}"--data-dir", str(one_file_data_dir){% endif %}]
    summary_path = tmp_path / "summary.json"
    flags = ["--epochs", "2", "--summary-json", str(summary_path), *data]
{%- if cookiecutter.task == "image" %}
    flags += ["--steps-per-epoch", "2"]
{%- endif %}
    model_dir = tmp_path / "workers"
    output = launched(cli, "train", *train_flags(model_dir, loop, *flags))
    summary = read_json(summary_path)
    assert (summary["replicas"], summary["workers"]) == (WORKERS, WORKERS)
    assert summary["global_batch_size"] == 64 * WORKERS
    assert one_fingerprint(output, model_dir) == summary["weights_fingerprint"]
    # Only the chief prints progress; worker 1 logs to its file.
    assert "[worker 0] epoch 2/2" in output and "[worker 1] epoch" not in output
    assert f"[worker 1] worker 1 logs to {model_dir / 'worker-1.log'}\n" in output
    assert "epoch 2/2" in worker_logs(output, model_dir)[1]
    # The same global batch on 2 logical replicas of one process.
    config = sgd_config("one-process", 64, epochs=2{% if cookiecutter.training_loop == "both" %}, loop=loop{% endif %}{% if cookiecutter.data_source == "tfrecord" %}, data_dir=str(one_file_data_dir){% endif %})
    single = train(config, two_replicas)
    assert single["replicas"] == REPLICAS == WORKERS
    # Each worker evaluates its share; together, every example once.
    assert_losses_alike(summary, single)
    assert_trained_alike(summary, single, config, two_replicas)
    assert abs(summary["eval_metric"] - single["eval_metric"]) < 1e-6


@pytest.mark.processes
def test_only_the_chief_keeps_checkpoints_and_a_restart_resumes(cli, tmp_path{% if cookiecutter.data_source == "tfrecord" %}, data_dir{% endif %}):
    model_dir = tmp_path / "run"
    loop = LOOPS[-1]
    data = [{% if cookiecutter.data_source == "tfrecord" %}"--data-dir", str(data_dir){% endif %}]
    flags = ["--steps-per-epoch", "20", "--steps-per-call", "1", "--checkpoint-every", "2", *data]
    launcher = start_launcher("train", *train_flags(model_dir, loop, "--epochs", "1", *flags))
    try:
        # Worker 1 saved global step 2 before it joined step 3. Stopped, the run
        # stays mid-epoch while we look.
        read = []
        pids = wait_for(launcher, "[worker 0] checkpoint: epoch 0 step 4 ", read=read)
        for pid in pids.values():
            os.kill(pid, signal.SIGSTOP)
        try:
            # The shared directory holds the chief's files and worker 1's log;
            # worker 1's copies go to a local scratch directory.
            assert sorted(path.name for path in model_dir.iterdir()) == [
                "attempts.json",
                "checkpoints",
                "logs",
{%- if cookiecutter.tracking == "mlflow" %}
                "mlflow_run.json",
{%- endif %}
                "settings.json",
                "statistics.json",
                "worker-1.log",
            ]
            scratch = Path(SCRATCH.search((model_dir / "worker-1.log").read_text())[1])
            assert (scratch / "checkpoints" / "ckpt-2.index").exists()
        finally:
            for pid in pids.values():
                os.kill(pid, signal.SIGCONT)
        rest, _ = launcher.communicate(timeout=300)
        first = "".join(read) + rest
        assert launcher.returncode == 0, first[-3000:]
    finally:
        stop_launcher(launcher)
    assert not scratch.exists()
    written = sorted(path.name for path in model_dir.iterdir())
    assert written == [
        "attempts.json",
        "checkpoints",
        "final.weights.h5",
        "logs",
{%- if cookiecutter.tracking == "mlflow" %}
        "mlflow_run.json",
{%- endif %}
        "model.keras",
        "settings.json",
        "statistics.json",
        "worker-1.log",
    ]
    logs = worker_logs(first, model_dir)
    assert [text.count("starting fresh") for text in logs.values()] == [1] * WORKERS
    summary_path = tmp_path / "summary.json"
    flags += ["--summary-json", str(summary_path)]
    second = launched(cli, "train", *train_flags(model_dir, loop, "--epochs", "2", *flags))
    # Every worker restored the chief's checkpoint: only epoch 2 ran.
    assert len(read_json(summary_path)["losses"]) == 1
    logs = worker_logs(second, model_dir)
    assert [text.count("resumed from epoch 1 step 0") for text in logs.values()] == [1] * WORKERS


def start_launcher(*command, launch_flags=()):
    launch = [sys.executable, "-m", "{{ cookiecutter.package_name }}", "launch"]
    return subprocess.Popen(
        [*launch, "--workers", str(WORKERS), *launch_flags, "--", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def stop_launcher(launcher):
    """SIGTERM first: the launcher then stops its workers (SIGKILL would orphan them)."""
    if launcher.poll() is None:
        launcher.terminate()
        try:
            launcher.wait(timeout=30)
        except subprocess.TimeoutExpired:
            launcher.kill()
    launcher.stdout.close()


def wait_for(launcher, text, timeout=300, read=None):
    """Read the launcher's output until a line starts with `text` (appending the
    lines to the list `read`, if given); return the workers' pids {index: pid}."""
    watchdog = threading.Timer(timeout, launcher.kill)  # never hang the suite
    watchdog.start()
    pids = {}
    try:
        for line in launcher.stdout:
            if read is not None:
                read.append(line)
            started = re.match(r"\[launch\] worker (\d+): pid (\d+)", line)
            if started:
                pids[int(started[1])] = int(started[2])
            if line.startswith(text):
                return pids
        raise AssertionError(f"the launcher ended before printing {text!r}")
    finally:
        watchdog.cancel()


def read_until(process, text, timeout=300):
    """Read a process's output until a line starts with `text`."""
    watchdog = threading.Timer(timeout, process.kill)  # never hang the suite
    watchdog.start()
    try:
        for line in process.stdout:
            if line.startswith(text):
                return
        raise AssertionError(f"the process ended before printing {text!r}")
    finally:
        watchdog.cancel()


# The project's command, lingering 6 s after it returns (a slow exit: the
# interpreter tearing down a large model, a slow file system).
LINGERING = (
    "import atexit, runpy, time; atexit.register(time.sleep, 6);"
    " runpy.run_module('{{ cookiecutter.package_name }}', run_name='__main__', alter_sys=True)"
)


# The project's command on a worker that reads the newest checkpoint as damaged
# (a DataLossError, as from a cached copy gone bad), while the others read it.
CHECKPOINTS_DAMAGED = """
import os, runpy
import tensorflow as tf
restore = tf.train.Checkpoint.restore
def restore_unless_damaged(self, path, *args, **kwargs):
    if DAMAGED:
        raise tf.errors.DataLossError(None, None, f"checksum mismatch in {path}")
    return restore(self, path, *args, **kwargs)
tf.train.Checkpoint.restore = restore_unless_damaged
runpy.run_module('{{ cookiecutter.package_name }}', run_name='__main__', alter_sys=True)
"""
NEWEST_CHECKPOINT_DAMAGED = CHECKPOINTS_DAMAGED.replace(
    "DAMAGED", "path == tf.train.latest_checkpoint(os.path.dirname(path))"
)
EVERY_CHECKPOINT_DAMAGED = CHECKPOINTS_DAMAGED.replace("DAMAGED", "True")


@contextlib.contextmanager
def worker_processes(command, count, scripts=None):
    """`count` workers running `command`, each a process with its own TF_CONFIG
    (output and errors on stdout), killed if still running when the block ends;
    `scripts` {index: Python code} runs that worker's command through the code
    (LINGERING, the CHECKPOINTS_DAMAGED ones) instead of the project's module."""
    scripts = scripts or {}
    project = ["-m", "{{ cookiecutter.package_name }}"]
    processes = [
        subprocess.Popen(
            [sys.executable, *(["-c", scripts[index]] if index in scripts else project), *command],
            env=worker_environment(tf_config, "-1"),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for index, tf_config in enumerate(worker_tf_configs(free_ports(count)))
    ]
    try:
        yield processes
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.communicate()


@pytest.mark.processes
def test_losing_worker_0_stops_the_others_retryably_and_a_relaunch_resumes(cli, tmp_path{% if cookiecutter.data_source == "tfrecord" %}, data_dir{% endif %}):
    # Worker 0 is the chief and hosts TensorFlow's coordination service: its loss is
    # the common case, and must be as retryable (143) as any other worker's.
    workers = 3
    model_dir = tmp_path / "run"
    data = [{% if cookiecutter.data_source == "tfrecord" %}"--data-dir", str(data_dir){% endif %}]
    # fmt: off
    command = [
        "train", "--epochs", "1", "--steps-per-epoch", "60", "--steps-per-call", "1",
        "--per-replica-batch-size", "8",  # small steps: 3 workers share 2 cores here
        "--checkpoint-every", "5", "--model-dir", str(model_dir), *data,
    ]
    # fmt: on
    with worker_processes(command, workers) as processes:
        read_until(processes[0], "checkpoint: epoch 0 step 5 ")  # training is under way
        processes[0].kill()
        killed_at = time.monotonic()
        outputs = [process.communicate(timeout=60)[0] for process in processes[1:]]
        elapsed = time.monotonic() - killed_at
    assert [process.returncode for process in processes[1:]] == [143] * (workers - 1), outputs
    assert elapsed < 30, f"the other workers took {elapsed:.0f}s to stop"
    for output in outputs:
        lost = re.findall(r"^error: the worker (\S+) stopped answering \(", output, re.MULTILINE)
        assert lost == ["/job:worker/replica:0/task:0"], output[-3000:]
    relaunched = cli("launch", "--workers", str(workers), "--", *command)
    assert relaunched.returncode == 0, relaunched.stdout[-3000:]
    resumed = re.search(r"^\[worker 0\] resumed from epoch 0 step (\d+)$", relaunched.stdout, re.M)
    assert resumed and int(resumed[1]) >= 5, relaunched.stdout[-3000:]


@pytest.mark.processes
def test_a_clean_run_ends_on_every_worker_without_a_crash_report(tmp_path{% if cookiecutter.data_source == "tfrecord" %}, data_dir{% endif %}):
    # Worker 1 leaves 6 s after the chief is done: a chief that did not wait for
    # it would be gone when its next heartbeat goes to the coordination service
    # (measured: "StartAbort UNAVAILABLE: Failed to send RPC to coordination
    # service" in worker 1's log, tensorflow/tensorflow#58434).
    data = [{% if cookiecutter.data_source == "tfrecord" %}"--data-dir", str(data_dir){% endif %}]
    # fmt: off
    command = [
        "train", "--epochs", "1", "--steps-per-epoch", "4", "--per-replica-batch-size", "8",
        "--model-dir", str(tmp_path / "run"), *data,
    ]
    # fmt: on
    with worker_processes(command, WORKERS, scripts={1: LINGERING}) as processes:
        outputs = [process.communicate(timeout=300)[0] for process in processes]
    assert [process.returncode for process in processes] == [0] * WORKERS, outputs
    assert "done: replicas" in outputs[0], outputs[0][-3000:]
    for output in outputs:
        assert "StartAbort" not in output and "crashed" not in output, output[-3000:]


@pytest.mark.processes
def test_a_stopped_worker_makes_the_others_exit_143_within_the_bound(tmp_path{% if cookiecutter.data_source == "tfrecord" %}, data_dir{% endif %}):
    # SIGSTOP: the worker's process is alive and its connections open, but it
    # never reaches the next all-reduce (a hung GPU, a stuck file read).
    model_dir = tmp_path / "run"
    data = [{% if cookiecutter.data_source == "tfrecord" %}"--data-dir", str(data_dir){% endif %}]
    # fmt: off
    command = [
        "train", "--epochs", "1", "--steps-per-epoch", "200", "--steps-per-call", "1",
        "--per-replica-batch-size", "8", "--checkpoint-every", "5", "--stall-timeout", "10",
        "--model-dir", str(model_dir), *data,
    ]
    # fmt: on
    with worker_processes(command, WORKERS) as processes:
        read_until(processes[0], "checkpoint: epoch 0 step 5 ")  # training is under way
        processes[1].send_signal(signal.SIGSTOP)
        stopped_at = time.monotonic()
        output = processes[0].communicate(timeout=120)[0]
        elapsed = time.monotonic() - stopped_at
    assert elapsed < 60, f"worker 0 took {elapsed:.0f} s to stop"
    # TensorFlow's coordination service notices the stopped worker's missing
    # heartbeats (measured: 7 s): 143, as for a preemption; the watchdog
    # (--stall-timeout 10 here) stops a run whose peers still send them but
    # never reach the all-reduce: 142, a stall.
    lost = r"^error: the worker /job:worker/replica:0/task:1 stopped answering"
    stalled = r"^no progress for \d+ s while .* - likely a worker that stopped"
    expected = {143: lost, 142: stalled}.get(processes[0].returncode)
    assert expected and re.search(expected, output, re.MULTILINE), output[-3000:]


@pytest.mark.processes
def test_a_hung_worker_is_stopped_and_the_launcher_exits_retryably(tmp_path{% if cookiecutter.data_source == "tfrecord" %}, data_dir{% endif %}):
    # Worker 1 frozen (SIGSTOP) never exits by itself: once worker 0 has stopped
    # for the lost peer, the launcher stops worker 1 after --grace-seconds and
    # exits as worker 0 did, retryably (a restart resumes from the checkpoint),
    # not with 1, which CI and wrapper scripts read as a permanent failure.
    data = [{% if cookiecutter.data_source == "tfrecord" %}"--data-dir", str(data_dir){% endif %}]
    # fmt: off
    command = [
        "train", "--epochs", "1", "--steps-per-epoch", "200", "--steps-per-call", "1",
        "--per-replica-batch-size", "8", "--checkpoint-every", "5", "--stall-timeout", "10",
        "--model-dir", str(tmp_path / "run"), *data,
    ]
    # fmt: on
    launcher = start_launcher(*command, launch_flags=("--grace-seconds", "5"))
    try:
        pids = wait_for(launcher, "[worker 0] checkpoint: epoch 0 step 5 ")
        os.kill(pids[1], signal.SIGSTOP)
        output, _ = launcher.communicate(timeout=180)
    finally:
        stop_launcher(launcher)
    stopped = re.search(
        r"^\[launch\] worker\(s\) 1 did not stop within 5 s of worker 0 exited with status"
        r" (14[23]) - stopped them; exiting (\d+), retryable$",
        output,
        re.MULTILINE,
    )
    assert stopped and stopped[1] == stopped[2], output[-3000:]
    assert launcher.returncode == int(stopped[2])


@pytest.mark.processes
def test_workers_resume_from_one_checkpoint_when_one_cannot_read_the_newest(tmp_path{% if cookiecutter.data_source == "tfrecord" %}, data_dir{% endif %}):
    # Each worker restores alone, and variables are broadcast only when created:
    # worker 1 falling back to the older checkpoint while worker 0 takes the
    # newest would train on gradients averaged from two models.
    model_dir = tmp_path / "run"
    data = [{% if cookiecutter.data_source == "tfrecord" %}"--data-dir", str(data_dir){% endif %}]
    # fmt: off
    flags = [
        "--steps-per-epoch", "6", "--steps-per-call", "1", "--checkpoint-every", "4",
        "--per-replica-batch-size", "8", "--stall-timeout", "30",
        "--model-dir", str(model_dir), *data,
    ]
    # fmt: on
    with worker_processes(["train", "--epochs", "1", *flags], WORKERS) as processes:
        outputs = [process.communicate(timeout=300)[0] for process in processes]
    assert [process.returncode for process in processes] == [0] * WORKERS, outputs
    # Epoch 1 kept global steps 4 and 6; worker 1 cannot read step 6.
    damaged = {1: NEWEST_CHECKPOINT_DAMAGED}
    with worker_processes(["train", "--epochs", "2", *flags], WORKERS, damaged) as processes:
        outputs = [process.communicate(timeout=300)[0] for process in processes]
    assert [process.returncode for process in processes] == [0] * WORKERS, outputs
    agreed = (
        "the workers restored different checkpoints (worker 0 step 6, worker 1 step 4):"
        " every worker resumes from step 4"
    )
    assert agreed in outputs[0], outputs[0][-3000:]
    logs = [outputs[0], (model_dir / "worker-1.log").read_text()]
    assert [log.count("resumed from epoch 0 step 4\n") for log in logs] == [1] * WORKERS, logs

    # Worker 1 can read none that worker 0 reads: its storage is at fault, not the
    # model. It says so to worker 0 at the gather both reach, and both exit
    # retryably (2 would end the run for good: a JobSet fails the set on it).
    damaged = {1: EVERY_CHECKPOINT_DAMAGED}
    with worker_processes(["train", "--epochs", "3", *flags], WORKERS, damaged) as processes:
        outputs = [process.communicate(timeout=300)[0] for process in processes]
    assert [process.returncode for process in processes] == [142] * WORKERS, outputs
    told = (
        f"error: worker 1 could not read the checkpoints in {model_dir / 'checkpoints'} that"
        " worker 0 restored: its storage is at fault, not the model - its log says why;"
        " restarting the job reads them again"
    )
    assert [output.splitlines()[-1] for output in outputs] == [told] * WORKERS, outputs
    assert "does not fit this model" in outputs[1], outputs[1][-3000:]  # its own reason


@pytest.fixture(scope="module")
def interrupted_run({% if cookiecutter.data_source == "tfrecord" %}data_dir{% endif %}):
    """model_dir -> the command of the run a kill and a SIGTERM interrupt below: 3
    epochs of 24 steps, a checkpoint every 5, a step a call (a SIGTERM saves
    after the next step)."""
    # fmt: off
    command = [
        "train", "--epochs", "3", "--steps-per-epoch", "24", "--steps-per-call", "1",
        "--checkpoint-every", "5",
{%- if cookiecutter.data_source == "tfrecord" %}
        "--data-dir", str(data_dir),
{%- endif %}
    ]
    # fmt: on
    return lambda model_dir: [*command, *train_flags(model_dir, LOOPS[-1])]


@pytest.fixture(scope="module")
def uninterrupted_fingerprint(tmp_path_factory, interrupted_run):
    """The fingerprint of that run's final weights, uninterrupted."""
    model_dir = tmp_path_factory.mktemp("uninterrupted")
    return one_fingerprint(launched(run_cli, *interrupted_run(model_dir)), model_dir)


@pytest.mark.processes
def test_two_workers_killed_mid_epoch_and_relaunched_resume_exactly(
    cli, tmp_path, interrupted_run, uninterrupted_fingerprint
):
    relaunched_dir = tmp_path / "killed"
    killed = start_launcher(*interrupted_run(relaunched_dir))
    try:
        # Inside epoch 2, after its first checkpoint (global step 25): the
        # checkpoints after epoch 1's end are mid-epoch.
        pids = wait_for(killed, "[worker 0] checkpoint: epoch 1 step 1 ")
        subprocess.run(["kill", "-KILL", str(pids[1])], check=True)
        # Worker 0 loses its peer and stops: the launcher exits retryably (a
        # cluster would restart the job).
        output, _ = killed.communicate(timeout=60)
        # 142, not 143: a cluster counts it against the job's restarts (an OOM
        # kill may come again on every restart).
        assert killed.returncode == 142, output[-3000:]
        ends = "worker 0 exited with status 143, worker 1 was killed by SIGKILL"
        assert f"[launch] stopped: {ends}; exiting 142, retryable\n" in output
    finally:
        stop_launcher(killed)
    killed_scratch = Path(SCRATCH.search((relaunched_dir / "worker-1.log").read_text())[1])
    assert killed_scratch.exists()  # SIGKILL left worker 1's copies behind
    relaunched = launched(cli, *interrupted_run(relaunched_dir))
    assert not killed_scratch.exists()  # the relaunched worker 1 removed them
    resumed = [
        re.findall(r"^resumed from epoch (\d+) step (\d+)$", text, re.MULTILINE)
        for text in worker_logs(relaunched, relaunched_dir).values()
    ]
    assert resumed[0] and resumed == [resumed[0]] * WORKERS, resumed
    assert resumed[0][0][0] == "1" and resumed[0][0][1] != "0", f"not mid-epoch: {resumed[0]}"
    assert one_fingerprint(relaunched, relaunched_dir) == uninterrupted_fingerprint


@pytest.mark.processes
def test_sigterm_to_one_worker_saves_the_same_step_on_both_and_the_relaunch_resumes(
    cli, tmp_path, interrupted_run, uninterrupted_fingerprint
):
    preempted_dir = tmp_path / "preempted"
    preempted = start_launcher(*interrupted_run(preempted_dir))
    try:
        pids = wait_for(preempted, "[worker 0] epoch 1/3")
        subprocess.run(["kill", "-TERM", str(pids[1])], check=True)  # worker 1 only
        output, _ = preempted.communicate(timeout=120)
        code = preempted.returncode
    finally:
        stop_launcher(preempted)
    assert code == 143, output[-3000:]
    saved = [
        re.findall(r"^preempted: (saved epoch \d+ step \d+)$", text, re.MULTILINE)
        for text in worker_logs(output, preempted_dir).values()
    ]
    assert saved[0] and saved == [saved[0]] * WORKERS, f"the workers saved: {saved}"
    relaunched = launched(cli, *interrupted_run(preempted_dir))
    position = saved[0][0].replace("saved ", "resumed from ")
    logs = worker_logs(relaunched, preempted_dir)
    assert [text.count(f"{position}\n") for text in logs.values()] == [1] * WORKERS
    assert one_fingerprint(relaunched, preempted_dir) == uninterrupted_fingerprint


{%- if cookiecutter.data_source == "tfrecord" %}


@pytest.mark.parametrize(
    "counts, per_replica, policy",
    [([1024] * 4, 96, "FILE"), ([700, 200, 100], 64, "DATA")],
    ids=["4-files-batch-96", "uneven-files"],
)
def test_two_workers_run_every_planned_step_on_awkward_shapes(
    cli, tmp_path, counts, per_replica, policy
):
    """4 files of 1024 at per-replica batch 96 ran out of data at the last step
    before (facts, section 11); files that cannot balance fall back to DATA."""
    write_shards(tmp_path, counts)
    summary_path = tmp_path / "summary.json"
    flags = train_flags(
        tmp_path / "run",
        LOOPS[-1],
        "--epochs",
        "2",
        "--data-dir",
        str(tmp_path),
        "--summary-json",
        str(summary_path),
    )
    output = launched(cli, "train", *flags, "--per-replica-batch-size", str(per_replica))
    assert f"input sharding across {WORKERS} workers: train {policy}" in output
    summary = read_json(summary_path)
    steps = sum(counts) // (per_replica * WORKERS)
    assert (summary["steps_per_epoch"], summary["global_step"]) == (steps, 2 * steps)
    assert one_fingerprint(output, tmp_path / "run") == summary["weights_fingerprint"]
{%- endif %}


def test_two_workers_pass_the_doctor_and_leave_together({% if cookiecutter.data_source == "tfrecord" %}data_dir{% endif %}):
    # Worker 1 lingers 6 s after its report, as in the clean-run test below: a
    # chief that did not wait for it would leave a crash report in its output.
    data = [{% if cookiecutter.data_source == "tfrecord" %}"--data-dir", str(data_dir){% endif %}]
    command = ["doctor", *data, "--per-replica-batch-size", "16"]
    with worker_processes(command, WORKERS, scripts={1: LINGERING}) as processes:
        outputs = [process.communicate(timeout=600)[0] for process in processes]
    assert [process.returncode for process in processes] == [0] * WORKERS, outputs
    for output in outputs:
        lines = output.splitlines()
        verdicts = [line.split()[0] for line in lines if line.split()[:1] in (["PASS"], ["FAIL"])]
        assert verdicts and set(verdicts) == {"PASS"}, output[-3000:]
        assert f"PASS replicas: {WORKERS} replicas on {WORKERS} worker(s)" in lines
        network = next(line for line in lines if " network: " in line)
        answered = "PASS network: 1 peer(s) answered; all-reduce of 32 MiB over 2 replicas"
        assert answered in network
        assert float(re.search(r"bus bandwidth ([\d.]+) GB/s", network)[1]) > 0
        assert "StartAbort" not in output and "crashed" not in output, output[-3000:]


def two_worker_cluster():
    """A strategy's view of a 2-worker cluster, as worker 0 (no server is started)."""
    spec = tf.train.ClusterSpec({"worker": ["localhost:1", "localhost:2"]})
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        spec, task_type="worker", task_id=0
    )
    return types.SimpleNamespace(cluster_resolver=resolver, num_replicas_in_sync=2)


def test_the_network_check_names_a_worker_that_does_not_answer(monkeypatch):
    asked = []
    monkeypatch.setattr(doctor, "answers", lambda peer, timeout: asked.append(peer) or False)
    with pytest.raises(doctor.CheckFailed, match=r"^/job:worker/replica:0/task:1 did not answer"):
        doctor.check_network(two_worker_cluster())
    assert asked == ["/job:worker/replica:0/task:1"]  # every peer, not this worker


def test_a_worker_that_does_not_answer_stops_the_doctor_before_any_collective(monkeypatch):
    cluster = ("2 replicas on 2 worker(s)", two_worker_cluster())
    monkeypatch.setattr(doctor, "check_replicas", lambda config: cluster)
    monkeypatch.setattr(doctor, "answers", lambda peer, timeout: False)
    failed = {result.name: result.detail for result in doctor.doctor(TrainConfig()).results}
    assert failed["network"].startswith("/job:worker/replica:0/task:1 did not answer")
    for name in ("dataset", "variables", "sync", "input"):
        assert failed[name] == "not run: a worker does not answer (see the network check)"


@pytest.mark.parametrize(
    "inherited, expected",
    [(None, ["0,1", "2,3"]), ("4,5,6,7", ["4,5", "6,7"]), ("3, 1,2,0", ["3,1", "2,0"])],
    ids=["all-gpus", "a-slice-of-the-machine", "reordered"],
)
def test_each_worker_gets_its_own_gpus(monkeypatch, inherited, expected):
    if inherited is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", inherited)
    assert worker_gpus(2, 2) == expected
    assert worker_gpus(2, None) == ["-1", "-1"]


@pytest.mark.parametrize(
    "codes, expected",
    [
        ([143, None], 143),
        ([-signal.SIGTERM, 143], 143),
        ([142, 143], 142),
        ([-signal.SIGKILL, 143], 142),
        ([143, -signal.SIGSEGV], 142),
    ],
    ids=["preempted", "terminated", "stalled", "killed", "crashed"],
)
def test_only_a_preemption_makes_the_launcher_exit_143(codes, expected):
    # 143 restarts without counting: a kill that may come again on every restart
    # (out of memory, a crash) must be counted, as 142 is.
    assert retry_status(codes) == expected


def test_too_few_gpus_for_the_workers_is_refused(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2")
    with pytest.raises(LaunchError, match=r"needs 4 GPUs, but CUDA_VISIBLE_DEVICES='0,1,2'"):
        worker_gpus(2, 2)


def test_launch_refuses_what_it_cannot_run_on_workers(cli):
    result = cli("launch", "--workers", "2", "--", "gpu-smoke")
    assert result.returncode == 2
    assert result.stderr.startswith(
        "error: launch runs train or doctor on every worker, not gpu-smoke"
    )
    assert len(result.stderr.splitlines()) == 1
{%- if cookiecutter.keras_package == "keras3" %}


FIT_ON_WORKERS = """
import keras
import tensorflow as tf

from {{ cookiecutter.package_name }}.data.pipeline import ArraySource
from {{ cookiecutter.package_name }}.task import build_model, sample_examples

strategy = tf.distribute.MultiWorkerMirroredStrategy()
examples = sample_examples(256, seed=0)
with strategy.scope():
    model = build_model(ArraySource(*examples).statistics())
    model.compile(
        optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
data = tf.data.Dataset.from_tensor_slices(examples)
data = data.batch(64, drop_remainder=True)
model.fit(data, epochs=1, verbose=0)
"""


class KerasFitFailsOnWorkers(Exception):
    """The failure of keras-team/keras#20585, recognized by its message."""


@pytest.mark.upstream
@pytest.mark.xfail(
    strict=True,
    raises=KerasFitFailsOnWorkers,
    reason="keras-team/keras#20585: Keras 3 model.fit fails under MultiWorkerMirroredStrategy"
    " (the fit engine runs train_step in its own loop and works there); when this passes,"
    " code calling model.fit directly works on workers too",
)
def test_upstream_keras3_fit_on_two_workers_still_fails(tmp_path, capfd):
    script = tmp_path / "fit_on_workers.py"
    script.write_text(FIT_ON_WORKERS)
    code = launch(WORKERS, [sys.executable, str(script)])
    output = capfd.readouterr().out
    if code != 0 and "Attempt to convert a value (PerReplica" in output:
        raise KerasFitFailsOnWorkers("keras-team/keras#20585")
    assert code == 0, output[-3000:]  # any other failure is a real one
{%- endif %}
