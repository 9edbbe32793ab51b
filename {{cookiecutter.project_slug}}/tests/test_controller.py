"""The controller, driven by a stub engine: checkpoint intervals, the resume
position, the work lost to a kill, and SIGTERM, in seconds rather than minutes.
(test_resume.py does the same with the real engines, in real processes.)"""

import logging
import os
import re
import signal
import time
from pathlib import Path

import pytest
import tensorflow as tf
from conftest import sample_statistics
from tensorflow.tsl.profiler.protobuf import xplane_pb2

from {{ cookiecutter.package_name }}.data import pipeline
from {{ cookiecutter.package_name }}.distribute.compat import keras
from {{ cookiecutter.package_name }}.task import build_model
from {{ cookiecutter.package_name }}.training import controller, watchdog
from {{ cookiecutter.package_name }}.training.assembly import build_controller, plan_run
from {{ cookiecutter.package_name }}.training.controller import Preempted, TrainingError

STEPS_PER_EPOCH = 10
EPOCHS = 2
CHECKPOINT_EVERY = 4
# Where the run saves: every 4 global steps and at both epoch ends.
SAVED = [4, 8, 10, 12, 16, 20]


class Killed(Exception):
    """Stands for a SIGKILL: the run ends at once, nothing more is saved."""


class StubEngine:
    """Counts steps and records which batch each one trained on; its "loss" is
    the batch's mean label, so the epoch losses depend on the data position."""

    name = "stub"

    def __init__(self, strategy, kill_after=None, sigterm_after=None, inf_bias_after=None):
        with strategy.scope():
            self.model = build_model(sample_statistics())
            self.optimizer = keras.optimizers.SGD(learning_rate=0.1)
            self.optimizer.build(self.model.trainable_variables)
        self.strategy = strategy
        self.kill_after = kill_after
        self.sigterm_after = sigterm_after
        self.inf_bias_after = inf_bias_after
        self.steps_run = 0
        self.batches_seen = []

    def train(self, iterator, num_steps):
        losses = []
        for _ in range(int(num_steps)):
            if self.steps_run == self.kill_after:  # killed right after step k
                raise Killed
            _, labels = next(iterator)
            labels = tf.concat(self.strategy.experimental_local_results(labels), axis=0)
            self.batches_seen.append(tuple(labels.numpy().tolist()))
            losses.append(float(tf.reduce_mean(tf.cast(labels, tf.float64))))
            self.steps_run += 1
            if self.steps_run == self.sigterm_after:
                os.kill(os.getpid(), signal.SIGTERM)
            if self.steps_run == self.inf_bias_after:  # the loss stays finite
                bias = self.model.trainable_variables[-1]
                bias.assign(tf.fill(bias.shape, float("inf")))
        return tf.constant(sum(losses) / len(losses)), tf.constant(0.5)


def stub_evaluated(config, strategy, plan, engine):
    """The run's controller, its evaluator swapped for a stub: the stub engine's
    model never trains, and evaluating it (the image model on 512 examples at
    every epoch end) would be most of these tests' time; so would its batch
    normalization check."""
    controller = build_controller(config, strategy, plan, engine, None, config.model_dir)
    controller.evaluate = lambda: (0.25, 0.5)
    controller.check_batch_norm = lambda model, training_loss: None
    return controller


@pytest.fixture
def run(one_device, sgd_config, caplog):
    """run(name, steps_per_call, **engine options) -> (summary or the exception,
    engine, log lines)."""
    caplog.set_level(logging.INFO)

    def start(name, steps_per_call=1, **engine_options):
        config = sgd_config(
            name,
            32,
            epochs=EPOCHS,
            steps_per_epoch=STEPS_PER_EPOCH,
            checkpoint_every=CHECKPOINT_EVERY,
            steps_per_call=steps_per_call,
        )
        engine = StubEngine(one_device, **engine_options)
        caplog.clear()
        plan = plan_run(config, one_device)
        try:
            outcome = stub_evaluated(config, one_device, plan, engine).run()
        except (Killed, Preempted) as stopped:
            outcome = stopped
        return outcome, engine, caplog.messages

    return start


def profiled_calls(log_dir):
    """The first step of each call named "train" in the TensorBoard profile
    under `log_dir` (TensorFlow's XSpace format)."""
    (path,) = (Path(log_dir) / "plugins" / "profile").glob("*/*.xplane.pb")
    space = xplane_pb2.XSpace.FromString(path.read_bytes())
    steps = []
    for plane in space.planes:
        names = {key: value.name for key, value in plane.event_metadata.items()}
        stats = {key: value.name for key, value in plane.stat_metadata.items()}
        for line in plane.lines:
            for event in line.events:
                if names.get(event.metadata_id) == "train":
                    values = {stats[stat.metadata_id]: stat.int64_value for stat in event.stats}
                    steps.append(values["step_num"])
    return sorted(steps)


def test_profile_steps_writes_a_profile_of_the_calls_that_run_them(
    one_device, sgd_config, tmp_path
):
    # Calls of 2 steps (1-2, 3-4, ...): steps 5 to 8 are the calls from 5 and from 7.
    config = sgd_config(
        "profiled",
        32,
        epochs=EPOCHS,
        steps_per_epoch=STEPS_PER_EPOCH,
        checkpoint_every=CHECKPOINT_EVERY,
        steps_per_call=2,
        profile_steps="5:8",
    )
    stub_evaluated(config, one_device, plan_run(config, one_device), StubEngine(one_device)).run()
    assert profiled_calls(tmp_path / "profiled" / "logs") == [5, 7]


def saved_steps(messages):
    return [int(m) for m in re.findall(r"\(global step (\d+)\)", "\n".join(messages))]


def resumed_at(messages):
    """The global step a run resumed from, read from its `resumed from` line."""
    ((epoch, step),) = re.findall(
        r"^resumed from epoch (\d+) step (\d+)$", "\n".join(messages), re.MULTILINE
    )
    return int(epoch) * STEPS_PER_EPOCH + int(step)


def test_checkpoints_every_n_steps_and_at_every_epoch_end(run, tmp_path):
    summary, _, messages = run("interval")
    assert saved_steps(messages) == SAVED
    assert "starting fresh" in messages
    assert summary["global_step"] == EPOCHS * STEPS_PER_EPOCH
    assert summary["checkpoint_every"] == CHECKPOINT_EVERY
    assert summary["resumed_from"] is None
    kept = tf.train.get_checkpoint_state(str(tmp_path / "interval" / "checkpoints"))
    assert [path.rsplit("-", 1)[1] for path in kept.all_model_checkpoint_paths] == ["16", "20"]


@pytest.mark.parametrize("killed_after", [3, 4, 5, 10, 11, 19])
def test_a_kill_loses_at_most_checkpoint_every_steps(run, killed_after):
    uninterrupted, reference, _ = run("uninterrupted")
    killed, _, _ = run("killed", kill_after=killed_after)
    assert isinstance(killed, Killed)
    resumed, engine, messages = run("killed")
    # The last save at or before the kill: a multiple of N, or an epoch end.
    expected = max([0, *(step for step in SAVED if step <= killed_after)])
    if expected:
        assert resumed_at(messages) == expected
    else:
        assert "starting fresh" in messages
    assert killed_after - expected < CHECKPOINT_EVERY
    # The data position is restored: the resumed run trains on exactly the batches
    # the uninterrupted run trained on from there, and ends with its losses.
    assert engine.batches_seen == reference.batches_seen[expected:]
    assert resumed["losses"] == uninterrupted["losses"][expected // STEPS_PER_EPOCH :]
    assert resumed["final_loss"] == uninterrupted["final_loss"]


def test_a_slow_call_warns_once_that_sigterm_waits_for_it(run, monkeypatch):
    _, _, messages = run("fast-calls", steps_per_call=4)
    assert not [message for message in messages if "lower --steps-per-call" in message]
    monkeypatch.setattr(controller, "SLOW_CALL_SECONDS", 0.0)  # every call is slow
    _, _, messages = run("slow-calls", steps_per_call=4)
    warnings = [message for message in messages if "lower --steps-per-call" in message]
    assert len(warnings) == 1 and warnings[0].startswith("a call of 4 steps took "), warnings


def last_of_the_run(messages):
    """The run's last message, before the tracker's at its end (values MLflow has
    not sent yet, on a loaded machine)."""
    return [message for message in messages if not message.startswith("MLflow")][-1]


def test_sigterm_saves_at_the_next_step_boundary_and_stops(run):
    handler = signal.getsignal(signal.SIGTERM)
    # 4 steps per call: SIGTERM during step 6 is acted on after step 8.
    stopped, _, messages = run("preempted", steps_per_call=4, sigterm_after=6)
    assert isinstance(stopped, Preempted)
    assert last_of_the_run(messages) == "preempted: saved epoch 0 step 8"
    assert saved_steps(messages) == [4, 8]
    resumed, _, messages = run("preempted", steps_per_call=4)
    assert resumed_at(messages) == 8
    assert resumed["resumed_from"] == {"epoch": 0, "step": 8}
    assert resumed["global_step"] == EPOCHS * STEPS_PER_EPOCH
    # The run's handler is gone after it: SIGTERM does what it did before.
    assert signal.getsignal(signal.SIGTERM) == handler


def test_sigterm_in_the_last_step_of_an_epoch_saves_the_epoch_end_before_evaluating(run):
    stopped, _, messages = run("preempted-at-epoch-end", sigterm_after=STEPS_PER_EPOCH)
    assert isinstance(stopped, Preempted)
    assert last_of_the_run(messages) == "preempted: saved epoch 1 step 0"
    assert saved_steps(messages) == [4, 8, 10]
    assert not [m for m in messages if m.startswith("epoch ")]  # no evaluation ran
    _, _, messages = run("preempted-at-epoch-end")
    assert resumed_at(messages) == STEPS_PER_EPOCH


def test_evaluation_runs_at_every_epoch_end(run):
    _, _, messages = run("evaluated")
    epochs = [m for m in messages if m.startswith("epoch ")]
    assert len(epochs) == EPOCHS
    assert all(", eval loss 0.2500 " in line for line in epochs)  # the evaluator it was handed


def test_one_pipeline_serves_every_epoch_without_rereading(one_device, sgd_config, monkeypatch):
    # Epochs shorter than a pass continue the stream. A pipeline made per epoch
    # read the pass again up to its position before each epoch's first batch
    # (epoch 7 of 16-step epochs skipped 112 batches): quadratic in the epochs.
    produced = []

    def counted_batches(records, per_replica_batch_size):
        def count(*batch):
            with tf.control_dependencies([tf.py_function(lambda: produced.append(1), [], [])]):
                return tf.nest.map_structure(tf.identity, batch)

        return batch_records(records, per_replica_batch_size).map(count)

    batch_records = pipeline.batch_records
    monkeypatch.setattr(pipeline, "batch_records", counted_batches)
    config = sgd_config("streamed", 32, epochs=8, steps_per_epoch=16, steps_per_call=4)
    engine = StubEngine(one_device)
    plan = plan_run(config, one_device)
    summary = stub_evaluated(config, one_device, plan, engine).run()
    assert summary["global_step"] == len(engine.batches_seen) == 8 * 16
    assert len(produced) == 8 * 16  # each batch read once, none skipped


def test_non_finite_weights_are_not_saved_though_the_loss_is_finite(run, tmp_path, caplog):
    refused = (
        r"^a weight became Inf or NaN by global step 8 \(the loss was finite\)"
        r" - lower --learning-rate or check the data; the last good checkpoint is kept$"
    )
    with pytest.raises(TrainingError, match=refused):
        run("inf-weights", inf_bias_after=5)
    assert saved_steps(caplog.messages) == [4]
    latest = tf.train.latest_checkpoint(str(tmp_path / "inf-weights" / "checkpoints"))
    assert latest.endswith("ckpt-4")


def test_the_watchdog_bounds_each_kind_by_its_slowest_after_the_first(monkeypatch):
    # (test_resume.py stalls a real run's input pipeline; this is the bound alone.)
    monkeypatch.setattr(watchdog, "CHECK_SECONDS", 0.02)
    stalls = []
    dog = watchdog.Watchdog(0.5, 142, on_stall=stalls.append)
    dog.start()
    try:
        with dog.watching("training call", "tracing", "a peer"):
            time.sleep(0.6)  # longer than 0.5, within the first call's 3 x 0.5
        assert dog.bound("training call") == 0.5  # the first call does not count
        with dog.watching("training call", "a call", "a peer"):
            time.sleep(0.1)
        assert 1.0 <= dog.bound("training call") < 2.5  # 10 x the slowest call
        assert dog.bound("save") == 1.5  # no save yet: the first-call bound
        assert not stalls
        with dog.watching("training call", "running step 3", "a peer or the input"):
            time.sleep(4)
    finally:
        dog.stop()
    assert len(stalls) == 1, stalls
    assert re.match(
        r"^no progress for \d s while running step 3 \(bound \d s: --stall-timeout 0.5, or 10x"
        r" the slowest training call so far\) - likely a peer or the input; exiting 142",
        stalls[0],
    ), stalls[0]


def test_work_that_reports_progress_outlasts_its_bound_and_stalls_once_it_stops(monkeypatch):
    # A resume's skip through the data reports progress from the input pipeline.
    monkeypatch.setattr(watchdog, "CHECK_SECONDS", 0.02)
    stalls = []
    dog = watchdog.Watchdog(0.2, 142, on_stall=stalls.append)  # the first call: 0.6 s
    dog.start()
    try:
        with dog.watching("training call", "skipping and tracing", "the input"):
            for _ in range(12):  # 2.4 s in all, never 0.6 s without progress
                time.sleep(0.2)
                dog.progress()
            assert not stalls
            time.sleep(1.5)  # then no progress past the bound
    finally:
        dog.stop()
    assert len(stalls) == 1 and stalls[0].startswith("no progress for 1 s while skipping"), stalls
