"""Nothing lost on a crash: a run killed with SIGKILL at any moment, even in the
middle of an epoch, and restarted with the same command ends where an
uninterrupted run ends (with gradient accumulation on, a checkpoint falls
between two updates; with the weights' moving averages on, they resume too);
SIGTERM saves and exits with 143; a NaN loss stops training without touching
the last good checkpoint; an unreadable newest checkpoint falls back to the one
before it."""

import importlib
import itertools
import json
import logging
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest
import tensorflow as tf
from conftest import (
    LOOPS,
    SLOW_INPUT,
    assert_same_weights,
    build_model_with_random_layers,
    outer_pid_of_child,
    read_json,
    sample_statistics,
    scalars,
    wait_until_tensorflow_loads,
)

from {{ cookiecutter.package_name }} import is_transient
from {{ cookiecutter.package_name }}.distribute.compat import keras, random_layers
from {{ cookiecutter.package_name }}.export import export
from {{ cookiecutter.package_name }}.task import build_model
from {{ cookiecutter.package_name }}.training import assembly, checkpointing
from {{ cookiecutter.package_name }}.training.assembly import train
from {{ cookiecutter.package_name }}.training.checkpointing import CheckpointError, Checkpoints
from {{ cookiecutter.package_name }}.training.controller import TrainingError

KILLS = 2
# 12 steps per epoch, a checkpoint every 5 steps: most saves fall inside an epoch.
CHECKPOINT_EVERY = 5
# Of the 48 steps, 36 warm up: the kills below (after at most 3 saves each)
# land in the warmup.
WARMUP_STEPS = 36


def train_command(model_dir, loop{% if cookiecutter.data_source == "tfrecord" %}, data_dir{% endif %}):
    # fmt: off
    command = [
        sys.executable, "-m", "{{ cookiecutter.package_name }}", "train",
{%- if cookiecutter.distribution == "mirrored" %}
        "--cpu-replicas", "2",
{%- endif %}
        "--epochs", "4", "--steps-per-epoch", "12", "--seed", "7",
        "--steps-per-call", "2", "--checkpoint-every", str(CHECKPOINT_EVERY),
        "--warmup-steps", str(WARMUP_STEPS),
        # A step is an update of 2 micro-batches: saves fall between updates.
        "--per-replica-batch-size", "32", "--accumulate-steps", "2",
        # The final weights are the weights' averages: a resume must restore them.
        "--ema-decay", "0.9",
        "--model-dir", str(model_dir), "--summary-json", str(model_dir / "summary.json"),
{%- if cookiecutter.data_source == "tfrecord" %}
        "--data-dir", str(data_dir),
{%- endif %}
    ]
    # fmt: on
{%- if cookiecutter.training_loop == "both" %}
    return [*command, "--loop", loop]
{%- else %}
    return command
{%- endif %}


def run_to_the_end(command):
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stderr


def run_and_stop(command, after_saves, delay, signum=signal.SIGKILL):
    """Start a run and send it `signum` `delay` seconds after its `after_saves`-th
    checkpoint line (a moment inside a training step, or inside the next save).
    Returns the exit code and the run's log."""
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    watchdog = threading.Timer(300, process.kill)  # never hang the suite
    watchdog.start()
    lines = []
    try:
        for line in process.stderr:
            lines.append(line)
            if (
                line.startswith("checkpoint: ")
                and sum(seen.startswith("checkpoint: ") for seen in lines) == after_saves
            ):
                threading.Timer(delay, process.send_signal, args=(signum,)).start()
                break
        lines += process.stderr.read().splitlines(keepends=True)
        return process.wait(), "".join(lines)
    finally:
        watchdog.cancel()
        process.kill()


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory{% if cookiecutter.data_source == "tfrecord" %}, data_dir{% endif %}):
    """loop -> the model directory of its run with no interruption (run once, shared
    by the kill and the SIGTERM tests)."""
    runs = {}

    def reference(loop):
        if loop not in runs:
            runs[loop] = tmp_path_factory.mktemp(f"uninterrupted-{loop}")
            run_to_the_end(train_command(runs[loop], loop{% if cookiecutter.data_source == "tfrecord" %}, data_dir{% endif %}))
        return runs[loop]

    return reference


def assert_same_result(resumed_dir, reference_dir):
    expected = read_json(reference_dir / "summary.json")
    actual = read_json(resumed_dir / "summary.json")
    assert abs(actual["final_loss"] - expected["final_loss"]) <= 1e-6
    assert abs(actual["eval_loss"] - expected["eval_loss"]) <= 1e-6
    assert actual["global_step"] == expected["global_step"]
    assert_same_weights(actual["weights_path"], expected["weights_path"], atol=1e-6)
    return actual


@pytest.mark.processes
@pytest.mark.parametrize("loop", LOOPS)
def test_runs_killed_mid_epoch_resume_to_the_uninterrupted_result(
    tmp_path,
    uninterrupted,
    loop,
{%- if cookiecutter.data_source == "tfrecord" %}
    data_dir,
{%- endif %}
):
    reference, resumed = uninterrupted(loop), tmp_path / "killed"
    command = train_command(resumed, loop{% if cookiecutter.data_source == "tfrecord" %}, data_dir{% endif %})
    moments = random.Random(f"{loop}-kills")
    for _ in range(KILLS):
        code, _ = run_and_stop(
            command, after_saves=moments.randint(1, 3), delay=moments.uniform(0, 0.3)
        )
        assert code == -signal.SIGKILL, f"the run ended before it was killed (exit code {code})"
    log = run_to_the_end(command)
    position = re.search(r"^resumed from epoch (\d+) step (\d+)$", log, re.MULTILINE)
    assert position, log[-3000:]
    summary = assert_same_result(resumed, reference)
    epoch, step = int(position[1]), int(position[2])
    assert summary["resumed_from"] == {"epoch": epoch, "step": step}
    # Killed in the warmup, resumed on the same learning rates: the schedule
    # follows the optimizer's step counter, which the checkpoint restored.
    resumed_at = epoch * 12 + step
    assert resumed_at < WARMUP_STEPS
    expected = dict(scalars(reference / "logs")["learning_rate"])
    rates = scalars(resumed / "logs")["learning_rate"]  # every attempt's
    # Every step the uninterrupted run recorded, recorded by some attempt: the
    # scalars go before the checkpoint, and a kill leaves no gap.
    assert set(expected) <= {s for s, _ in rates}
    assert rates == [(s, pytest.approx(expected[s], rel=1e-6)) for s, _ in rates]


@pytest.mark.processes
@pytest.mark.parametrize("loop", LOOPS)
def test_sigterm_saves_exits_143_and_the_rerun_resumes_exactly(
    tmp_path,
    uninterrupted,
    loop,
{%- if cookiecutter.data_source == "tfrecord" %}
    data_dir,
{%- endif %}
):
    reference, preempted = uninterrupted(loop), tmp_path / "preempted"
    command = train_command(preempted, loop{% if cookiecutter.data_source == "tfrecord" %}, data_dir{% endif %})
    code, log = run_and_stop(command, after_saves=1, delay=0.05, signum=signal.SIGTERM)
    assert code == 143, log[-3000:]
    saved = re.search(r"^preempted: saved epoch (\d+) step (\d+)$", log, re.MULTILINE)
    assert saved, log[-3000:]
    rerun = run_to_the_end(command)
    assert f"resumed from epoch {saved[1]} step {saved[2]}\n" in rerun
    assert_same_result(preempted, reference)


def assert_exits_143_at_once(process, log_lines="", skipping=False):
    """SIGTERM now; the process exits 143 within seconds, saying it had nothing to save."""
    sent = time.monotonic()
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=120)
    log = log_lines + err
    assert process.returncode == 143, log[-3000:]
    # At once: 30 s leaves room for a loaded machine; the skip below takes 10 s or more.
    waited = time.monotonic() - sent
    assert waited < (10 if skipping else 30), f"exited {waited:.0f} s after SIGTERM"
    assert "SIGTERM before this process trained a step, or after its last checkpoint:" in log
    after = log.partition("SIGTERM")[2]
    assert not re.search("^checkpoint: ", after, re.MULTILINE), log[-3000:]  # nothing saved
    return log


@pytest.mark.processes
def test_a_sigterm_while_tensorflow_starts_exits_143_at_once(tmp_path{% if cookiecutter.data_source == "tfrecord" %}, data_dir{% endif %}):
    # A default SIGTERM would kill it (-15), with no word; as a container's PID 1,
    # where the kernel drops a signal without a handler, it would train on.
    command = train_command(tmp_path / "run", LOOPS[0]{% if cookiecutter.data_source == "tfrecord" %}, data_dir{% endif %})
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_until_tensorflow_loads(process.pid, process)
        assert_exits_143_at_once(process)
    finally:
        process.kill()
    assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.processes
@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare"),
    reason="running the trainer as PID 1 of a PID namespace (a container) needs root and unshare",
)
def test_a_sigterm_to_the_trainer_as_pid_1_at_start_up_exits_143_at_once(tmp_path{% if cookiecutter.data_source == "tfrecord" %}, data_dir{% endif %}):
    # What a pod's container does with `exec train`: the kernel gives PID 1 only
    # the signals it has a handler for.
    command = train_command(tmp_path / "run", LOOPS[0]{% if cookiecutter.data_source == "tfrecord" %}, data_dir{% endif %})
    unshare = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--mount-proc", *command],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        trainer = outer_pid_of_child(unshare.pid, unshare)
        wait_until_tensorflow_loads(trainer, unshare)
        sent = time.monotonic()
        os.kill(trainer, signal.SIGTERM)
        _, err = unshare.communicate(timeout=120)
    finally:
        unshare.kill()
    assert unshare.returncode == 143, err[-3000:]
    assert time.monotonic() - sent < 30  # at once, on a loaded machine too
    assert "SIGTERM before this process trained a step" in err


@pytest.mark.processes
def test_a_sigterm_during_a_resumes_skip_exits_143_without_waiting_for_it(
    tmp_path,
{%- if cookiecutter.data_source == "tfrecord" %}
    data_dir,
{%- endif %}
):
    command = train_command(tmp_path / "run", LOOPS[0]{% if cookiecutter.data_source == "tfrecord" %}, data_dir{% endif %})
    code, log = run_and_stop(command, after_saves=1, delay=0.05, signum=signal.SIGTERM)
    assert code == 143, log[-3000:]
    saved = re.search(r"^preempted: saved epoch (\d+) step (\d+)$", log, re.MULTILINE)
    assert saved and saved[2] != "0", log[-3000:]  # mid-epoch: the resume skips batches
    process = subprocess.Popen(
        [sys.executable, "-c", SLOW_INPUT, *command[3:]],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = []
        for line in process.stderr:
            lines.append(line)
            if line.startswith("resumed from epoch"):
                break
        # The resumed pipeline's batches take 0.5 s each, 10 s or more before the
        # first call ends: the old handler waited for them, and for the save after it.
        time.sleep(1.0)
        assert_exits_143_at_once(process, "".join(lines), skipping=True)
    finally:
        process.kill()
    rerun = run_to_the_end(command)
    assert f"resumed from epoch {saved[1]} step {saved[2]}\n" in rerun


def attempts_recorded(model_dir):
    path = model_dir / "attempts.json"
    return json.loads(path.read_text())["attempts"] if path.exists() else []


@pytest.mark.processes
def test_attempts_killed_before_any_progress_stop_the_run_in_one_line(
    tmp_path,
{%- if cookiecutter.data_source == "tfrecord" %}
    data_dir,
{%- endif %}
):
    # A node that dies on every attempt before the first checkpoint: a launcher
    # restarting on every kill would run it for ever.
    run = tmp_path / "run"
    command = [*train_command(run, LOOPS[0]{% if cookiecutter.data_source == "tfrecord" %}, data_dir{% endif %}), "--no-progress-attempts", "2"]
    for number in (1, 2):
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 120
            while len(attempts_recorded(run)) < number and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            process.kill()
            process.wait()
    assert not (run / "checkpoints").exists()  # killed before its first checkpoint
    stopped = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert stopped.returncode == 1, stopped.stderr[-3000:]
    assert "Traceback" not in stopped.stderr
    assert stopped.stderr.splitlines()[-1] == (
        "error: the last 2 attempts of this run made no progress, each started from global"
        " step 0 (attempt 1: no end recorded: killed (out of memory, SIGKILL after the grace"
        " period) or lost; attempt 2: no end recorded: killed (out of memory, SIGKILL after"
        " the grace period) or lost) - find and fix the cause (a node, the storage, memory),"
        " then run the same command again; --no-progress-attempts sets how many are allowed"
    )
    assert [attempt.get("status") for attempt in attempts_recorded(run)] == [None, None, 1]
    # Fixed: a person runs it again, and it trains to the end.
    run_to_the_end(command)
    assert attempts_recorded(run)[-1]["status"] == 0


# `train`, its training input stalling for good after 12 batches (a read that
# never returns, a stuck network file system).
STALLING_TRAIN = """
import sys
import time

import tensorflow as tf

from {{ cookiecutter.package_name }} import cli
from {{ cookiecutter.package_name }}.data import pipeline

batched = []


def counted_then_stuck(positions):
    batched.append(1)
    if len(batched) > 12:
        time.sleep(3600)
    return positions


def stalling(positions, records):
    gated = tf.py_function(counted_then_stuck, [positions], positions.dtype)
    gated.set_shape(positions.shape)
    return gated, records


batch_records = pipeline.batch_records
pipeline.batch_records = lambda records, size: batch_records(records, size).map(stalling)
sys.exit(cli.main(sys.argv[1:]))
"""


@pytest.mark.processes
def test_a_stalled_run_exits_142_saying_where_and_the_rerun_resumes_exactly(
    tmp_path,
    uninterrupted,
{%- if cookiecutter.data_source == "tfrecord" %}
    data_dir,
{%- endif %}
):
    loop = LOOPS[0]
    reference, stalled = uninterrupted(loop), tmp_path / "stalled"
    command = train_command(stalled, loop{% if cookiecutter.data_source == "tfrecord" %}, data_dir{% endif %})
    started = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-c", STALLING_TRAIN, *command[3:], "--stall-timeout", "10"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 142, run.stderr[-3000:]
    assert "(most recent call first)" in run.stderr  # every thread's stack
    stalled_at = re.search(
        r"^no progress for (\d+) s while running epoch \d+ steps \d+-\d+ \(bound (\d+) s:"
        r" --stall-timeout 10, .*\) - likely a worker that stopped .* or an input pipeline"
        r" that stopped producing; exiting 142 so the job restarts from the last checkpoint$",
        run.stderr,
        re.MULTILINE,
    )
    assert stalled_at, run.stderr[-3000:]
    assert int(stalled_at[1]) <= int(stalled_at[2]) + 2  # within a second or two of it
    assert time.monotonic() - started < 120
    saved = re.findall(r"^checkpoint: epoch (\d+) step (\d+) ", run.stderr, re.MULTILINE)
    assert saved, run.stderr[-3000:]
    (ended,) = attempts_recorded(stalled)
    assert ended["status"] == 142 and ended["cause"] == stalled_at[0]  # the watchdog's line
    rerun = run_to_the_end(command)
    assert f"resumed from epoch {saved[-1][0]} step {saved[-1][1]}\n" in rerun
    assert_same_result(stalled, reference)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_finished_run_restarted_has_nothing_left_to_train(one_device, sgd_config, loop):
    config = sgd_config("finished", 128, epochs=2{% if cookiecutter.training_loop == "both" %}, loop=loop{% endif %})
    first = train(config, one_device)
    again = train(config, one_device)
    assert again["losses"] == []
    assert again["final_loss"] == first["final_loss"]
    assert again["weights_fingerprint"] == first["weights_fingerprint"]
    assert again["resumed_from"] == {"epoch": 2, "step": 0}


def restoring_nan_weights(restore):
    """Checkpoints.restore, then every trainable weight NaN (as in a run that
    diverged): the next step's loss is NaN."""

    def restore_then_poison(self, *args):
        position = restore(self, *args)
        for variable in self.checkpoint.model.trainable_variables:
            variable.assign(tf.fill(variable.shape, float("nan")))
        return position

    return restore_then_poison


@pytest.mark.parametrize("loop", LOOPS)
def test_nan_loss_stops_training_and_keeps_the_last_good_checkpoint(
    one_device, sgd_config, monkeypatch, loop
):
    config = sgd_config("nan", 128, epochs=1{% if cookiecutter.training_loop == "both" %}, loop=loop{% endif %})
    train(config, one_device)
    latest = tf.train.latest_checkpoint(f"{config.model_dir}/checkpoints")
    assert latest
    monkeypatch.setattr(Checkpoints, "restore", restoring_nan_weights(Checkpoints.restore))
    config.epochs = 3
    stopped = r"^the training loss became nan in epoch 2 by step \d+ "
    with pytest.raises(TrainingError, match=stopped):
        train(config, one_device)
    assert tf.train.latest_checkpoint(f"{config.model_dir}/checkpoints") == latest


def with_engine_calls(build_engine, calls, instead):
    """training.build_engine whose engine runs `instead(engine, train, iterator,
    num_steps)` for its calls numbered in `calls` (from 1), `train` the real call."""

    def build(*args):
        engine = build_engine(*args)
        real_train, numbers = engine.train, itertools.count(1)

        def train(iterator, num_steps):
            if next(numbers) in calls:
                return instead(engine, real_train, iterator, num_steps)
            return real_train(iterator, num_steps)

        engine.train = train
        return engine

    return build


def diverging(engine, real_train, iterator, num_steps):
    """The call trains, then its weights and loss blow up (every weight NaN)."""
    _, metric = real_train(iterator, num_steps)
    for variable in engine.model.trainable_variables:
        variable.assign(tf.fill(variable.shape, float("nan")))
    return tf.constant(float("nan")), metric


def skipping(engine, real_train, iterator, num_steps):
    """The call reads its batches and trains on none of them."""
    for _ in range(int(num_steps)):
        next(iterator)
    return tf.constant(0.0), tf.constant(0.0)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_blow_up_rolls_back_to_the_last_checkpoint_skips_its_batches_and_finishes(
    one_device, sgd_config, monkeypatch, caplog, loop
):
    # Calls of 2 steps, a checkpoint at step 4: the 3rd call (steps 5-6) blows up.
    settings = dict(epochs=1, steps_per_epoch=8, steps_per_call=2, checkpoint_every=4{% if cookiecutter.training_loop == "both" %}, loop=loop{% endif %})
    build_engine = assembly.build_engine
    monkeypatch.setattr(assembly, "build_engine", with_engine_calls(build_engine, {3}, skipping))
    skipped = train(sgd_config("skipped", 128, **settings), one_device)
    monkeypatch.setattr(assembly, "build_engine", with_engine_calls(build_engine, {3}, diverging))
    recovered = train(sgd_config("recovered", 128, recovery_trials=1, **settings), one_device)
    assert (recovered["recoveries"], skipped["recoveries"]) == (1, 0)
    assert recovered["global_step"] == 8
    # Back to step 4's weights, then steps 7-8's batches: not a replay of 5-6.
    assert_same_weights(recovered["weights_path"], skipped["weights_path"], atol=1e-6)
    assert (
        "the training loss became nan in epoch 1 by step 6: rolled back to the checkpoint"
        " at step 4 and skipped the 2 steps since it (recovery 1 of 1)"
    ) in caplog.text


# Calls of 2 steps, a checkpoint at step 4.
BLOW_UP_RUN = dict(epochs=1, steps_per_epoch=8, steps_per_call=2, checkpoint_every=4)


def blowing_up(monkeypatch, calls):
    """The engine's calls numbered `calls` blow up (diverging)."""
    build_engine = with_engine_calls(assembly.build_engine, calls, diverging)
    monkeypatch.setattr(assembly, "build_engine", build_engine)


def test_bad_batches_in_calls_in_a_row_each_roll_back_while_trials_last(
    one_device, sgd_config, monkeypatch
):
    # Calls 3 and 4 (steps 5-8) blow up: two bad batches close together, each
    # rolled back and skipped, as if their calls had trained on nothing.
    build_engine = assembly.build_engine
    monkeypatch.setattr(assembly, "build_engine", with_engine_calls(build_engine, {3, 4}, skipping))
    skipped = train(sgd_config("skipped-both", 128, **BLOW_UP_RUN), one_device)
    blowing_up(monkeypatch, {3, 4})
    recovered = train(sgd_config("in-a-row", 128, recovery_trials=2, **BLOW_UP_RUN), one_device)
    assert (recovered["recoveries"], recovered["global_step"]) == (2, 8)
    assert_same_weights(recovered["weights_path"], skipped["weights_path"], atol=1e-6)


def test_a_rollback_leaves_the_undone_steps_out_of_the_recorded_loss(
    one_device, sgd_config, monkeypatch
):
    # Call 3 (steps 5-6) blows up and is undone: the loss recorded at step 8 is
    # that of steps 7-8, and with step 4's it makes the epoch's mean.
    blowing_up(monkeypatch, {3})
    config = sgd_config("recorded", 128, recovery_trials=1, **BLOW_UP_RUN)
    recovered = train(config, one_device)
    losses = dict(scalars(os.path.join(config.model_dir, "logs"))["loss"])
    assert sorted(losses) == [4, 8]
    assert (4 * losses[4] + 2 * losses[8]) / 6 == pytest.approx(recovered["losses"][0], rel=1e-5)


def test_an_epoch_whose_every_step_is_rolled_back_stops_the_run_in_one_line(
    one_device, sgd_config, monkeypatch
):
    # Every call blows up (a NaN in every batch): skipping batches does not help,
    # and trials to spare would end the run "done" and untrained.
    blowing_up(monkeypatch, {1, 2, 3, 4})
    config = sgd_config("every-call", 128, recovery_trials=5, **BLOW_UP_RUN)
    stopped = (
        r"^every step of epoch 1 was rolled back and skipped: the loss does not recover when"
        r" batches are skipped - check the data"
    )
    with pytest.raises(TrainingError, match=stopped):
        train(config, one_device)


@pytest.mark.parametrize("loop", LOOPS)
def test_blow_ups_past_the_recovery_trials_stop_in_one_line(
    one_device, sgd_config, monkeypatch, loop
):
    settings = dict(BLOW_UP_RUN{% if cookiecutter.training_loop == "both" %}, loop=loop{% endif %})
    blowing_up(monkeypatch, {2, 3})
    config = sgd_config("twice", 128, recovery_trials=1, **settings)
    stopped = (
        r"^the training loss became nan in epoch 1 by step 6, with all 1 --recovery-trials"
        r" used - lower --learning-rate"
    )
    with pytest.raises(TrainingError, match=stopped):
        train(config, one_device)
    config = sgd_config("bounded", 128, loss_upper_bound=1e-3, **settings)
    above = r"^the training loss \S+ went above --loss-upper-bound 0.001 in epoch 1 by step 2 "
    with pytest.raises(TrainingError, match=above):
        train(config, one_device)


def crashing(engine, real_train, iterator, num_steps):
    """The process dies in this call (as under a SIGKILL): nothing after the last
    checkpoint is kept."""
    raise SystemExit("killed")


@pytest.mark.parametrize("loop", LOOPS)
def test_random_layers_killed_mid_epoch_resume_to_the_uninterrupted_weights(
    two_replicas, sgd_config, monkeypatch, loop
):
    # Dropout and Gaussian noise draw from generators whose state moves at every
    # step: a resume must restore it, or it draws other masks than the run would.
    module = importlib.import_module(f"{{ cookiecutter.package_name }}.training.engine_{loop}")
    monkeypatch.setattr(module, "build_model", build_model_with_random_layers)
    # 6 steps an epoch, calls of 2, a checkpoint every 4: the 5th call (steps 9-10)
    # dies after the checkpoint at step 8, 2 steps into epoch 2.
    settings = dict(epochs=2, steps_per_epoch=6, steps_per_call=2, checkpoint_every=4{% if cookiecutter.training_loop == "both" %}, loop=loop{% endif %})
    reference = train(sgd_config("uninterrupted", 64, **settings), two_replicas)
    config = sgd_config("killed", 64, **settings)
    build_engine = assembly.build_engine
    monkeypatch.setattr(assembly, "build_engine", with_engine_calls(build_engine, {5}, crashing))
    with pytest.raises(SystemExit):
        train(config, two_replicas)
    monkeypatch.setattr(assembly, "build_engine", build_engine)
    resumed = train(config, two_replicas)
    assert resumed["resumed_from"] == {"epoch": 1, "step": 2}
    assert resumed["weights_fingerprint"] == reference["weights_fingerprint"]
    assert resumed["final_loss"] == reference["final_loss"]


@pytest.mark.parametrize("loop", LOOPS)
def test_an_unreadable_newest_checkpoint_resumes_exactly_from_the_previous_one(
    one_device, sgd_config, caplog, loop
):
    # 6 steps per epoch, a checkpoint every 4: epoch 1 keeps global steps 4 and 6.
    settings = dict(steps_per_epoch=6, checkpoint_every=4{% if cookiecutter.training_loop == "both" %}, loop=loop{% endif %})
    reference = train(sgd_config("uninterrupted", 128, epochs=2, **settings), one_device)
    config = sgd_config("truncated", 128, epochs=1, **settings)
    train(config, one_device)
    newest = tf.train.latest_checkpoint(f"{config.model_dir}/checkpoints")
    assert newest.endswith("ckpt-6")
    # A disk or a copy that lost the data file's tail.
    (data_file,) = tf.io.gfile.glob(f"{newest}.data-*")
    os.truncate(data_file, os.path.getsize(data_file) // 2)
    config.epochs = 2
    caplog.set_level(logging.INFO)
    resumed = train(config, one_device)
    assert resumed["resumed_from"] == {"epoch": 0, "step": 4}
    (warning,) = [
        record.getMessage()
        for record in caplog.records
        if record.levelno == logging.WARNING and record.name == checkpointing.__name__
    ]
    fallback = (
        rf"^the newest checkpoint {re.escape(newest)} cannot be restored \(.+\):"
        rf" resuming from the previous one, {re.escape(newest[:-1])}4$"
    )
    assert re.match(fallback, warning), warning
    assert resumed["final_loss"] == pytest.approx(reference["final_loss"], abs=1e-6)
    assert resumed["eval_loss"] == pytest.approx(reference["eval_loss"], abs=1e-6)
    assert resumed["global_step"] == reference["global_step"]
    assert_same_weights(resumed["weights_path"], reference["weights_path"], atol=1e-6)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_url_model_dir_holds_the_whole_run_which_resumes_and_exports_from_it(
    one_device, sgd_config, tmp_path, monkeypatch, loop
):
    # ram:// (TensorFlow's in-memory file system, this process's only) stands for
    # gs://: a URL only tf.io.gfile reaches. Read as a local path, it would be
    # ./ram:/... in the working directory.
    monkeypatch.chdir(tmp_path)
    model_dir = f"ram://{tmp_path.name}/run"
    config = sgd_config(
        "unused",
        16,
        epochs=1,
        steps_per_epoch=3,
        model_dir=model_dir,
        summary_json=f"{model_dir}/summary.json",
{%- if cookiecutter.training_loop == "both" %}
        loop=loop,
{%- endif %}
    )
    summary = train(config, one_device)
    written = sorted(tf.io.gfile.listdir(model_dir))
    assert written == [
        "checkpoints",
        "final.weights.h5",
        "logs",
{%- if cookiecutter.tracking == "mlflow" %}
        "mlflow_run.json",
{%- endif %}
        "model.keras",
        "settings.json",
        "statistics.json",
        "summary.json",
    ]
    checkpoints = f"{model_dir}/checkpoints"
    assert tf.train.latest_checkpoint(checkpoints) == f"{checkpoints}/ckpt-3"
    assert tf.io.gfile.listdir(f"{model_dir}/logs")
    assert summary["weights_path"] == f"{model_dir}/final.weights.h5"
    with tf.io.gfile.GFile(f"{model_dir}/summary.json") as handle:
        assert json.load(handle)["weights_fingerprint"] == summary["weights_fingerprint"]
    config.epochs = 2
    assert train(config, one_device)["resumed_from"] == {"epoch": 1, "step": 0}
    assert export(model_dir) == f"{model_dir}/export/1"
    assert "serving_default" in tf.saved_model.load(f"{model_dir}/export/1").signatures
    assert [name.rstrip("/") for name in tf.io.gfile.listdir(f"{model_dir}/export")] == ["1"]
    assert not list(tmp_path.iterdir())  # nothing written locally


def wider_model(build_model):
    def build(*args, **kwargs):
        model = build_model(*args, **kwargs)
        outputs = model.outputs[0]
        # A layer of its own inputs' scale, whatever the outputs' (a regression's
        # may be far from 0): its bias trains, the outputs stay the model's.
        more = keras.layers.Dense(outputs.shape[-1])(outputs * 0.0)
        return type(model)(model.inputs, outputs + more)

    return build


def flaky_storage(monkeypatch, failures):
    """The storage does not answer (UnavailableError) when the newest checkpoint's
    (ckpt-6's) files are looked at, `failures` times (None: ever); returns the
    paths it failed for."""
    stat, failed = tf.io.gfile.stat, []

    def stat_or_fail(path):
        if path.endswith("ckpt-6.index") and (failures is None or len(failed) < failures):
            failed.append(path)
            raise tf.errors.UnavailableError(None, None, "the storage did not answer")
        return stat(path)

    monkeypatch.setattr(tf.io.gfile, "stat", stat_or_fail)
    monkeypatch.setattr(checkpointing, "RETRY_SECONDS", 0.01)
    return failed


def test_a_model_dir_whose_storage_does_not_answer_is_retryable_not_bad_input(
    tmp_path, monkeypatch
):
    def unavailable(path):
        raise tf.errors.UnavailableError(None, None, f"{path}: 503 Service Unavailable")

    monkeypatch.setattr(tf.io.gfile, "makedirs", unavailable)
    with pytest.raises(checkpointing.StorageUnavailable) as failed:
        checkpointing.prepare_model_dir(f"ram://{tmp_path.name}/run")
    assert is_transient(failed.value)  # exit 142: not 2, nor a lost peer's UnavailableError
    assert "did not answer" in str(failed.value)


def test_a_checkpoint_read_the_storage_did_not_answer_is_retried_not_passed_over(
    one_device, sgd_config, monkeypatch
):
    # 6 steps per epoch, a checkpoint every 4: epoch 1 keeps global steps 4 and 6.
    config = sgd_config("flaky", 128, epochs=1, steps_per_epoch=6, checkpoint_every=4)
    train(config, one_device)
    failed = flaky_storage(monkeypatch, failures=2)
    config.epochs = 2
    resumed = train(config, one_device)
    assert [path.rsplit("/", 1)[-1] for path in failed] == ["ckpt-6.index"] * 2
    # The newest, read again: a hiccup is not damage (the older one is step 4).
    assert resumed["resumed_from"] == {"epoch": 1, "step": 0}


def test_storage_that_never_answers_stops_the_run_retryably(one_device, sgd_config, monkeypatch):
    config = sgd_config("down", 128, epochs=1, steps_per_epoch=6, checkpoint_every=4)
    train(config, one_device)
    failed = flaky_storage(monkeypatch, failures=None)
    config.epochs = 2
    unavailable = (
        rf"^the storage did not answer {checkpointing.READ_ATTEMPTS} reads of"
        r" .*checkpoints/ckpt-6"
        r" \(the storage did not answer\) - restarting the job reads it again$"
    )
    with pytest.raises(checkpointing.StorageUnavailable, match=unavailable):
        train(config, one_device)
    assert len(failed) == checkpointing.READ_ATTEMPTS


@pytest.mark.parametrize(
    "content, shown",
    [
        (b"\x00\x17 cut short", r"'\\x00\\x17 cut short'"),
        (b"", "''"),
        (b"\xff\xfe", r"'\ufffd\ufffd'"),
    ],
    ids=["cut-short", "empty", "not-utf-8"],
)
def test_a_damaged_checkpoint_state_file_is_refused_not_retried(
    one_device, sgd_config, content, shown
):
    # Before, it was taken for storage that did not answer: the run exited 142,
    # to be restarted into the same file again and again (or an empty file gave
    # a traceback).
    config = sgd_config("damaged-state", 128, epochs=1, steps_per_epoch=6, checkpoint_every=4)
    train(config, one_device)
    with open(os.path.join(config.model_dir, "checkpoints", "checkpoint"), "wb") as state_file:
        state_file.write(content)
    config.epochs = 2
    damaged = (
        r"^the checkpoint state file .*checkpoints/checkpoint cannot be read as one"
        rf" \({shown}\) - rewrite it as the line"
        r' model_checkpoint_path: "ckpt-N", for the newest ckpt-N.index beside it$'
    )
    with pytest.raises(checkpointing.CheckpointError, match=damaged):
        train(config, one_device)
    # The fix it gives resumes.
    with open(os.path.join(config.model_dir, "checkpoints", "checkpoint"), "w") as state_file:
        state_file.write('model_checkpoint_path: "ckpt-6"\n')
    assert train(config, one_device)["resumed_from"] == {"epoch": 1, "step": 0}


# What the refusal names: a model's variable with no value in the checkpoint
# (assert_consumed), or a checkpoint of a model with a layer more, whose
# variables assert_consumed lets pass in some models (the model's variables
# compared) and names in others; or, where the checkpoint's layers are matched
# by position (tf_keras), the first value whose shape does not fit.
UNMATCHED = {
    "checkpoint": "were not bound to checkpointed values|Shape mismatch",
    "model": (
        r"its model has \d+ variables, this one \d+; variable \d+: |Shape mismatch"
        "|Unresolved object in checkpoint"
    ),
}


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("lacking", UNMATCHED)
def test_a_checkpoint_of_another_model_is_refused_in_one_line(
    one_device, sgd_config, monkeypatch, loop, lacking
):
    """A layer added to the model (the checkpoint lacks its variables) or taken
    away (the model lacks some of the checkpoint's) is refused, naming what does
    not match: a resume restores every variable or none."""
    config = sgd_config("changed", 128, epochs=1{% if cookiecutter.training_loop == "both" %}, loop=loop{% endif %})
    module = importlib.import_module(f"{{ cookiecutter.package_name }}.training.engine_{loop}")
    built, wider = module.build_model, wider_model(module.build_model)
    first, second = (built, wider) if lacking == "checkpoint" else (wider, built)
    monkeypatch.setattr(module, "build_model", first)
    train(config, one_device)
    monkeypatch.setattr(module, "build_model", second)
    config.epochs = 2
    refused = (
        r"^the checkpoint .*ckpt-\d+ does not fit this model and optimizer"
        rf" \(.*({UNMATCHED[lacking]}).*\) - train into"
    )
    with pytest.raises(CheckpointError, match=refused):
        train(config, one_device)


def write_layout(monkeypatch, entries_left_out=(), layout=checkpointing.LAYOUT):
    """Make the runs below save checkpoints as an earlier (or a later) version of
    the project did: without `entries_left_out`, recording `layout`."""
    built = Checkpoints.__init__

    def init(self, *args, **kwargs):
        built(self, *args, **kwargs)
        self.layout.assign(layout)
        kept = {name: entry for name, entry in self.entries.items() if name not in entries_left_out}
        self.checkpoint = tf.train.Checkpoint(**kept)
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, self.manager.directory, max_to_keep=checkpointing.KEEP_CHECKPOINTS
        )

    monkeypatch.setattr(Checkpoints, "__init__", init)


def test_a_checkpoint_of_the_first_layout_resumes_saying_what_stands_in(
    one_device, sgd_config, monkeypatch, caplog
):
    # What the first checkpoints held: the model, the optimizer and the position,
    # none of the entries added since (a run started before `cruft update`).
    first_layout = sgd_config("first-layout", 128, epochs=1)
    with monkeypatch.context() as patch:
        write_layout(patch, [*checkpointing.STAND_INS, "layout"], layout=1)
        train(first_layout, one_device)
    current = sgd_config("current-layout", 128, epochs=1)
    train(current, one_device)
    caplog.set_level(logging.WARNING)
    first_layout.epochs = current.epochs = 2
    resumed = train(first_layout, one_device)
    predates = [m for m in caplog.messages if " predates " in m]
    assert len(predates) == 1, caplog.messages
    assert re.fullmatch(
        r"the checkpoint .*ckpt-\d+ \(layout 1; this project writes 2\) predates [\w, ]+:"
        r" .*the random layers' generators start again from --seed.*",
        predates[0],
    ), predates[0]
    left_out = predates[0].partition(" predates ")[2].partition(":")[0].split(", ")
    assert sorted(left_out) == sorted(checkpointing.STAND_INS)
    assert resumed["resumed_from"] == {"epoch": 1, "step": 0}
    # Resumed as from a checkpoint of today's layout: the model and optimizer restored
    # alike (the random layers' masks aside, which start again from the seed).
    expected = train(current, one_device)
    assert resumed["global_step"] == expected["global_step"]
    if not random_layers(build_model(sample_statistics())):
        assert resumed["weights_fingerprint"] == expected["weights_fingerprint"]
    # Its next checkpoint is of today's layout: no line the next time.
    caplog.clear()
    first_layout.epochs = 3
    train(first_layout, one_device)
    assert not [m for m in caplog.messages if " predates " in m]


def test_a_checkpoint_of_a_later_layout_is_refused_in_one_line(one_device, sgd_config, monkeypatch):
    config = sgd_config("later-layout", 128, epochs=1)
    with monkeypatch.context() as patch:
        write_layout(patch, layout=checkpointing.LAYOUT + 1)
        train(config, one_device)
    config.epochs = 2
    refused = (
        rf"^the checkpoint .*ckpt-\d+ has layout {checkpointing.LAYOUT + 1}, and this version of"
        rf" the project reads layouts up to {checkpointing.LAYOUT}: a later version wrote it -"
        " update the project, or train into a new --model-dir$"
    )
    with pytest.raises(CheckpointError, match=refused):
        train(config, one_device)


def test_resuming_with_another_global_batch_is_refused_and_the_same_one_continues(
    two_replicas, one_device, sgd_config
):
    # 2 replicas x 64 saved; 1 replica x 64 would silently read another data stream.
    config = sgd_config("replicas", 64, epochs=1{% if cookiecutter.training_loop == "both" %}, loop=LOOPS[-1]{% endif %})
    train(config, two_replicas)
    latest = tf.train.latest_checkpoint(f"{config.model_dir}/checkpoints")
    config.epochs = 2
    refused = (
        r"^the checkpoints in \S+ were written with global batch size 128; this run has"
        r" global batch size 64 - resume with the same settings"
    )
    with pytest.raises(CheckpointError, match=refused):
        train(config, one_device)
    assert tf.train.latest_checkpoint(f"{config.model_dir}/checkpoints") == latest
    # The same global batch on another replica count continues the same stream.
    config.per_replica_batch_size = 128
    resumed = train(config, one_device)
    assert resumed["resumed_from"] == {"epoch": 1, "step": 0}
    assert len(resumed["losses"]) == 1
