"""The faults a cluster delivers, each through the launcher's own rules: two
workers, and every attempt the rules restart started again, as a
{% if cookiecutter.launcher == "kubernetes" %}JobSet (its rules read from k8s/jobset.yaml){% else %}launcher that follows docs/clusters.md's restart table{% endif %} would, until the run
ends. Each run ends on the weights of a run that met no fault, but the node
that dies on every attempt, which the trainer stops with one line
(training/attempts.py). No fault that passes ends a run for good.

`make test-faults` runs them all (marker `faults`; `make test` leaves them out,
the template's own `make test` runs a few).
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import (
{%- if cookiecutter.training_loop == "both" %}
    LOOPS,
{%- endif %}
    SLOW_INPUT,
    outer_pid_of_child,
    wait_until_tensorflow_loads,
)
{%- if cookiecutter.launcher == "kubernetes" %}
from test_kubernetes import FAIL, JOBSET, jobset_action, pod_failure_policy_outcome
{%- endif %}

from {{ cookiecutter.package_name }}.distribute.launch import (
    free_ports,
    worker_environment,
    worker_tf_configs,
)

pytestmark = [pytest.mark.processes, pytest.mark.faults]

WORKERS = 2
FINGERPRINT = re.compile(r"^final weights fingerprint: (\w+)$", re.MULTILINE)
# How long the others get to exit once one worker failed (the pods' grace period,
# short here: every worker exits at once or saves within seconds).
GRACE_SECONDS = 30
ATTEMPT_SECONDS = 300
# The project's command, as each worker runs it.
PROJECT = [sys.executable, "-m", "{{ cookiecutter.package_name }}"]
{%- if cookiecutter.launcher != "kubernetes" %}
FAIL = "fail"
{%- endif %}


def launcher_action(status):
    """What the launcher does when the first failed worker exited with `status`."""
{%- if cookiecutter.launcher == "kubernetes" %}
    return jobset_action(JOBSET, *pod_failure_policy_outcome(JOBSET, status))
{%- else %}
    return FAIL if status in (1, 2) else "restart"
{%- endif %}


class Worker:
    """A worker process of an attempt; its output (stdout and stderr) kept by line."""

    def __init__(self, argv, environment):
        self.process = subprocess.Popen(
            argv, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.lines = []
        self.reader = threading.Thread(target=self.read, daemon=True)
        self.reader.start()

    def read(self):
        for line in self.process.stdout:
            self.lines.append(line)

    def wait_for(self, text, timeout=ATTEMPT_SECONDS):
        """Wait until the worker prints a line that starts with `text`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(line.startswith(text) for line in list(self.lines)):
                return
            if self.process.poll() is not None:
                self.reader.join(5)
                if any(line.startswith(text) for line in self.lines):
                    return
                break
            time.sleep(0.05)
        raise AssertionError(f"no line {text!r}: {''.join(self.lines)[-3000:]}")

    def status(self):
        """The exit status as a container reports it (128 + N for signal N)."""
        code = self.process.poll()
        return None if code is None else (128 - code if code < 0 else code)

    def output(self):
        self.reader.join(10)
        return "".join(self.lines)


def start_workers(command, scripts):
    """One attempt: WORKERS workers of `command`, each with its own TF_CONFIG;
    `scripts` {index: argv prefix} runs a worker through a script or a wrapper."""
    return [
        Worker([*scripts.get(index, PROJECT), *command], worker_environment(tf_config, "-1"))
        for index, tf_config in enumerate(worker_tf_configs(free_ports(WORKERS)))
    ]


def first_end(workers):
    """(index, status) of the first worker to fail, or (None, 0) when every one
    finished: what a launcher acts on."""
    deadline = time.monotonic() + ATTEMPT_SECONDS
    while time.monotonic() < deadline:
        statuses = [worker.status() for worker in workers]
        failed = [(index, status) for index, status in enumerate(statuses) if status]
        if failed:
            return failed[0]
        if all(status == 0 for status in statuses):
            return None, 0
        time.sleep(0.05)
    raise AssertionError("an attempt hung: " + " | ".join(w.output()[-1500:] for w in workers))


def stop(workers):
    """What a launcher does to the pods of a failed attempt: SIGTERM, and SIGKILL
    after the grace period. Returns each worker's status."""
    for worker in workers:
        if worker.process.poll() is None:
            worker.process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + GRACE_SECONDS
    for worker in workers:
        try:
            worker.process.wait(max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            worker.process.kill()
            worker.process.wait()
    return [worker.status() for worker in workers]


class Job:
    """Attempts of `command` until the run ends, restarted by the launcher's rules.
    `fault(number, workers)` acts on attempt `number` (from 1) once it started;
    `scripts(number)` -> {index: argv prefix} for its workers."""

    def __init__(self, command, fault=None, scripts=None, limit=8):
        self.command, self.limit = command, limit
        self.fault = fault or (lambda number, workers: None)
        self.scripts = scripts or (lambda number: {})
        self.ends = []  # (the first failed worker, its status, each worker's) per attempt
        self.outputs = []

    def run(self):
        """The statuses the attempts ended with (the last: 0, or what failed the run)."""
        for number in range(1, self.limit + 1):
            workers = start_workers(self.command, self.scripts(number))
            try:
                self.fault(number, workers)
                index, status = first_end(workers)
                statuses = stop(workers)
            finally:
                for worker in workers:
                    if worker.process.poll() is None:
                        worker.process.kill()
            self.outputs.append([worker.output() for worker in workers])
            self.ends.append((index, status, statuses))
            if status == 0 or launcher_action(status) == FAIL:
                return [end[1] for end in self.ends]
        raise AssertionError(f"still restarting after {self.limit} attempts: {self.ends}")

    def fingerprint(self):
        """The final weights' fingerprint, the same on every worker of the last attempt."""
        found = set()
        for index, output in enumerate(self.outputs[-1]):
            text = output
            if index:  # the other workers log to their files (cli.log_to_worker_file)
                text = (Path(self.model_dir) / f"worker-{index}.log").read_text()
            found.add(FINGERPRINT.findall(text)[-1])
        assert len(found) == 1, f"the workers' weights differ: {found}"
        return found.pop()

    @property
    def model_dir(self):
        return self.command[self.command.index("--model-dir") + 1]


def train_command(model_dir, data_dir, *extra):
    # fmt: off
    return [
        "train", "--epochs", "2", "--steps-per-epoch", "12", "--steps-per-call", "1",
        "--checkpoint-every", "4", "--per-replica-batch-size", "16", "--stall-timeout", "20",
        "--model-dir", str(model_dir),
{%- if cookiecutter.data_source == "tfrecord" %}
        "--data-dir", str(data_dir),
{%- endif %}
{%- if cookiecutter.training_loop == "both" %}
        "--loop", LOOPS[-1],
{%- endif %}
        *extra,
    ]
    # fmt: on


@pytest.fixture(scope="module")
def faultless(tmp_path_factory{% if cookiecutter.data_source == "tfrecord" %}, data_dir{% endif %}):
    """The fingerprint of the run with no fault."""
    job = Job(train_command(tmp_path_factory.mktemp("faultless"), {% if cookiecutter.data_source == "tfrecord" %}data_dir{% else %}None{% endif %}))
    assert job.run() == [0]
    return job.fingerprint()


@pytest.fixture
def command(tmp_path{% if cookiecutter.data_source == "tfrecord" %}, data_dir{% endif %}):
    return lambda *extra: train_command(tmp_path / "run", {% if cookiecutter.data_source == "tfrecord" %}data_dir{% else %}None{% endif %}, *extra)


def assert_ends(job, expected, faultless):
    """The attempts ended as `expected` and the run on the faultless weights."""
    assert job.run() == expected, job.ends
    assert job.fingerprint() == faultless


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare"),
    reason="running a worker as PID 1 of a PID namespace (a container) needs root and unshare",
)
def test_a_sigterm_at_start_up_to_a_worker_that_is_pid_1(command, faultless):
    # The pod's container runs the trainer as PID 1; it is preempted while it
    # starts (and its peer waits for it to join the cluster).
    pid_1 = ["unshare", "--pid", "--fork", "--mount-proc", *PROJECT]

    def preempted_while_starting(number, workers):
        if number == 1:
            trainer = outer_pid_of_child(workers[1].process.pid, workers[1].process)
            wait_until_tensorflow_loads(trainer, workers[1].process)
            os.kill(trainer, signal.SIGTERM)

    job = Job(command(), preempted_while_starting, lambda number: {1: pid_1})
    assert_ends(job, [143, 0], faultless)
    assert "nothing to save, exiting 143" in job.outputs[0][1]


def test_sigkill_of_one_worker_mid_call_then_sigterm_during_the_resumes_skip(command, faultless):
    slow = [sys.executable, "-c", SLOW_INPUT]

    def faults(number, workers):
        if number == 1:  # inside epoch 2, after its first checkpoint (global step 16)
            workers[0].wait_for("checkpoint: epoch 1 step 4 ")
            workers[1].process.kill()
        elif number == 2:  # both skip 16 batches, 0.5 s each: preempted in the skip
            workers[0].wait_for("resumed from epoch 1 step 4")
            time.sleep(1.0)
            for worker in workers:
                worker.process.send_signal(signal.SIGTERM)

    job = Job(command(), faults, lambda number: {0: slow, 1: slow} if number == 2 else {})
    # A kill (137), a lost peer (143), then the SIGTERM, exits at once: nothing to save.
    assert_ends(job, [137, 143, 0], faultless)
    assert "nothing to save, exiting 143" in job.outputs[1][0]


# The project's command on a worker whose training input stops for good after 10
# batches (a read that never returns).
HANGING_INPUT = SLOW_INPUT.replace(
    "    time.sleep(0.5)",
    "    late.count = getattr(late, 'count', 0) + 1\n    if late.count > 10:\n"
    "        time.sleep(3600)",
)


def test_a_worker_that_hangs(command, faultless):
    hanging = [sys.executable, "-c", HANGING_INPUT]
    job = Job(command(), scripts=lambda number: {1: hanging} if number == 1 else {})
    ends = job.run()
    assert ends[-1] == 0 and ends[0] == 142, job.ends  # the watchdog of the hung worker
    assert job.fingerprint() == faultless


# The project's command on a worker whose storage does not answer, this time: a
# stat of a checkpoint file, READ_FAILURES times (then it answers); or the save
# of the checkpoint at global step SAVE_FAILS (raised once).
FLAKY_STORAGE = """
from {{ cookiecutter.package_name }}.distribute import preemption

preemption.catch_from_start()  # first, as the command does

import runpy
import tensorflow as tf

stat, save, failures = tf.io.gfile.stat, tf.train.CheckpointManager.save, []

def flaky_stat(path):
    if ".index" in path and len(failures) < READ_FAILURES:
        failures.append(path)
        raise tf.errors.UnavailableError(None, None, f"{path}: 503 Service Unavailable")
    return stat(path)

def flaky_save(self, checkpoint_number=None, **kwargs):
    if checkpoint_number == SAVE_FAILS:
        raise tf.errors.UnavailableError(None, None, "ckpt: connection reset by peer")
    return save(self, checkpoint_number=checkpoint_number, **kwargs)

tf.io.gfile.stat = flaky_stat
tf.train.CheckpointManager.save = flaky_save
runpy.run_module("{{ cookiecutter.package_name }}", run_name="__main__", alter_sys=True)
"""


def test_transient_storage_errors_on_a_checkpoint_read_and_a_write(command, faultless):
    failing_write = FLAKY_STORAGE.replace("READ_FAILURES", "0").replace("SAVE_FAILS", "8")
    failing_reads = FLAKY_STORAGE.replace("READ_FAILURES", "2").replace("SAVE_FAILS", "-1")
    scripts = {1: {0: [sys.executable, "-c", failing_write]}}
    scripts[2] = {0: [sys.executable, "-c", failing_reads]}
    job = Job(command(), scripts=lambda number: scripts.get(number, {}))
    assert_ends(job, [142, 0], faultless)
    assert "the storage did not answer the save of global step 8" in job.outputs[0][0]
    assert "the checkpoint storage did not answer" in job.outputs[1][0]  # read again


# The project's command on a worker that reads every checkpoint as damaged (a
# DataLossError, as from a cached copy gone bad), while the others read them.
CHECKPOINTS_DAMAGED = """
from {{ cookiecutter.package_name }}.distribute import preemption

preemption.catch_from_start()  # first, as the command does

import runpy
import tensorflow as tf

def damaged(self, path, *args, **kwargs):
    raise tf.errors.DataLossError(None, None, f"checksum mismatch in {path}")

tf.train.Checkpoint.restore = damaged
runpy.run_module("{{ cookiecutter.package_name }}", run_name="__main__", alter_sys=True)
"""


def test_a_checkpoint_one_worker_cannot_read(command, faultless):
    damaged = [sys.executable, "-c", CHECKPOINTS_DAMAGED]

    def stopped_after_a_checkpoint(number, workers):
        if number == 1:
            workers[0].wait_for("checkpoint: epoch 0 step 8 ")
            workers[1].process.kill()

    job = Job(
        command(),
        stopped_after_a_checkpoint,
        lambda number: {1: damaged} if number == 2 else {},
    )
    # Killed; then worker 1's storage (not the model): retryable; then it reads.
    assert_ends(job, [137, 142, 0], faultless)
    assert "its storage is at fault, not the model" in job.outputs[1][0]


# The project's command on a chief whose storage takes 70 s over the final
# model's save: longer than a minute, within the watchdog's bound for it with
# --stall-timeout 30 (3 x 30 s, a first save).
SLOW_FINAL_SAVE = """
from {{ cookiecutter.package_name }}.distribute import preemption

preemption.catch_from_start()  # first, as the command does

import runpy
import time
from {{ cookiecutter.package_name }}.distribute.compat import keras

save_weights = keras.Model.save_weights

def slow_save_weights(self, path, *args, **kwargs):
    if str(path).endswith("final.weights.h5"):
        time.sleep(70)
    return save_weights(self, path, *args, **kwargs)

keras.Model.save_weights = slow_save_weights
runpy.run_module("{{ cookiecutter.package_name }}", run_name="__main__", alter_sys=True)
"""


def test_a_chief_whose_final_save_is_slow(command, faultless):
    slow = [sys.executable, "-c", SLOW_FINAL_SAVE]
    job = Job(command("--stall-timeout", "30"), scripts=lambda number: {0: slow})
    assert_ends(job, [0], faultless)
    # The other worker waited at the end for the chief's tail, and left after it.
    for output in job.outputs[0]:
        assert "did not all reach the end of the run" not in output, output[-2000:]


def attempts_recorded(model_dir):
    path = Path(model_dir) / "attempts.json"
    try:
        return json.loads(path.read_text())["attempts"]
    except (OSError, ValueError):
        return []  # none yet, or being replaced


def test_a_node_that_dies_on_every_attempt_stops_the_run_in_one_line(command):
    def dies_while_starting(number, workers):
        # Once the chief recorded the attempt, its peer's node is lost; unless the
        # chief found the run stuck and stops it (exit 1).
        deadline = time.monotonic() + ATTEMPT_SECONDS
        while len(attempts_recorded(job.model_dir)) < number:
            assert time.monotonic() < deadline, "the chief recorded no attempt"
            time.sleep(0.05)
        if "status" not in attempts_recorded(job.model_dir)[-1]:
            workers[1].process.kill()

    job = Job(command("--no-progress-attempts", "2"), dies_while_starting)
    ends = job.run()
    assert ends[-1] == 1 and len(ends) == 3, job.ends
    last_line = job.outputs[-1][0].splitlines()[-1]
    assert last_line.startswith(
        "error: the last 2 attempts of this run made no progress, each started from global"
        " step 0 (attempt 1: "
    ), last_line
