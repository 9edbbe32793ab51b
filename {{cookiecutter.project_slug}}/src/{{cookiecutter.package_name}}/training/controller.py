"""The training run, in global steps.

The controller owns everything about a run that does not depend on how a step
is computed: restoring the last checkpoint, the data position, running the
engine "the next k steps" at a time, a checkpoint every `checkpoint_every`
steps and at every epoch end, the loss guard (stop, or roll back and skip),
evaluation at every epoch end, SIGTERM, the scalars it hands the tracker, and
the run's tail (final model, the batch-normalization check, summary).
An engine (training/engine_fit.py, training/engine_custom.py) only knows how to run k steps.

An engine provides:
    name             "fit" or "custom"
    model, optimizer what the run trains (built under the strategy's scope)
    metrics          the training metrics it updates
    train(iterator, k) -> (mean loss, mean metric) of the next k steps
"""

import contextlib
import json
import logging
import math
import os
import signal
import threading
import time

import tensorflow as tf

from {{ cookiecutter.package_name }} import PROCESS_STARTED, TrainerError, write_atomically
from {{ cookiecutter.package_name }}.distribute import preemption
from {{ cookiecutter.package_name }}.distribute.compat import KERAS_PACKAGE
from {{ cookiecutter.package_name }}.distribute.strategy import is_chief, make_any_worker, worker_count
from {{ cookiecutter.package_name }}.progress import Progress
from {{ cookiecutter.package_name }}.task import METRIC_NAME
from {{ cookiecutter.package_name }}.training.attempts import NoProgress
from {{ cookiecutter.package_name }}.training.checkpointing import (
    FINAL_WEIGHTS,
    fingerprint,
    remove_worker_dir,
)
from {{ cookiecutter.package_name }}.training.optimizer import (
    describe_scaling,
    large_batch_note,
    scaling_rule,
)
from {{ cookiecutter.package_name }}.training.replica_sync import ReplicaSync
from {{ cookiecutter.package_name }}.training.watchdog import FIRST_CALL_FACTOR

log = logging.getLogger(__name__)

# A SIGTERM waits for the running call, then the save: calls longer than this
# leave too little of the 120 s the cluster files give before the kill.
SLOW_CALL_SECONDS = 60.0
# What a stalled piece of work is likely waiting on (the watchdog's message).
A_PEER = "a worker that stopped or cannot be reached (a collective waits for every replica)"
A_PEER_OR_INPUT = A_PEER + ", or an input pipeline that stopped producing"
A_PEER_OR_STORAGE = A_PEER + ", or the file system"
A_STORAGE = "the file system"
A_BUILD_OR_INPUT = "building the model's copy, or an input pipeline that stopped producing"
# The chief's writes outside its watchdog at the end of a run: the summary, the
# tracker's end (MLflow's last values wait at most 30 s after a run that is done,
# 2 s after a SIGTERM's save).
UNWATCHED_WRITES_SECONDS = 120


class TrainingError(TrainerError):
    pass


def tail_seconds(config, preempted):
    """The most the chief's tail may take after the run's last collective, which
    the other workers wait for at the end (strategy.finish_together). A run that
    is done: the final model's save and the batch-normalization check (each
    under the watchdog's bound for a first piece of its kind; the other workers
    check too, but save to local scratch), then the unwatched writes. A run
    saved for a SIGTERM: the writes alone, well inside the grace period."""
    if preempted:
        return UNWATCHED_WRITES_SECONDS // 4
    return 2 * FIRST_CALL_FACTOR * config.stall_timeout + UNWATCHED_WRITES_SECONDS


class Preempted(Exception):
    """The run saved a checkpoint after SIGTERM and stops (exit status 143)."""


class Controller:
    """Runs a training job from its parts, built elsewhere (training.build_controller):

    engine          runs the next k steps (its model and optimizer are trained)
    plan            the data plan: global batch, steps per epoch, the sources
    config          the run's settings (epochs, checkpoint interval, steps per call)
    checkpoints     restores and saves the model, optimizer and `progress`
    settings        the run's settings, checked on resume and kept (training/run_settings.py)
    evaluate        () -> (eval loss, eval metric), over the whole evaluation set
    check_batch_norm
                    (model, training loss) -> {"moving_averages": its held-out loss
                    with them, "batch_statistics": with those}, or None: each
                    worker's check at the end of the run, which warns when the
                    averages lag
    training_input  (epoch, first step, epochs, on skip progress) -> the distributed
                    training batches
    learning_rate   the optimizer's schedule (training/optimizer.py), for the TensorBoard scalars
    tracker         where the run's scalars go, by global step, and how the run
                    ended: FINISHED (with the summary), KILLED (preempted) or
                    FAILED (tracking/tracker.py)
    watchdog        stops the run, exit 142, when a piece of work stalls (training/watchdog.py)
    attempts        the chief's record of the run's attempts, which stops a run that
                    makes no progress (training/attempts.py); None on the other workers, and
                    where the run is not the process's command (a notebook, a test)
    profile         the TensorBoard profile of --profile-steps (Profile)
    model_dir       the run's directory; write_dir: this worker's (the chief's: the same)
    """

    def __init__(
        self,
        strategy,
        engine,
        plan,
        config,
        *,
        checkpoints,
        settings,
        evaluate,
        check_batch_norm,
        training_input,
        learning_rate,
        tracker,
        watchdog,
        attempts,
        profile,
        model_dir,
        write_dir,
    ):
        self.strategy = strategy
        self.engine = engine
        self.plan = plan
        self.config = config
        self.checkpoints = checkpoints
        self.settings = settings
        self.progress = checkpoints.progress
        self.evaluate = evaluate
        self.check_batch_norm = check_batch_norm
        self.training_input = training_input
        self.learning_rate = learning_rate
        self.profile = profile
        self.tracker = tracker
        self.watchdog = watchdog
        self.attempts = attempts
        self.model_dir = model_dir  # a local path or a URL (gs://): joined with os.path
        self.write_dir = write_dir
        self.weights_finite = make_finite_check(engine.model.trainable_variables)
        self.replica_sync = ReplicaSync(strategy, engine.model, engine.optimizer)
        self.throughput = Throughput(plan.global_batch_size)
        self.losses, self.final_metric, self.last_eval = [], None, None
        self.seconds_to_first_step = None
        self.warned_slow_call = False
        self.skip = SkipProgress(watchdog, shown=is_chief(strategy))

    def run(self):
        """Train from the last checkpoint to the last epoch; return the summary."""
        self.watchdog.start()
        status, summary = "FAILED", None
        log.info(
            "learning rate: %.4g (%s), %s",
            self.learning_rate.peak,
            describe_scaling(self.config, self.plan.global_batch_size),
            self.learning_rate.describe(),
        )
        note = large_batch_note(self.config, self.plan.global_batch_size)
        if note:
            log.warning("%s", note)
        try:
            with self.watchdog.watching("restore", "restoring the checkpoint", A_PEER_OR_STORAGE):
                # Settings are checked before the restore: another optimizer would
                # fail it less clearly.
                resumed_from = self.checkpoints.restore(self.settings.check_resumption)
            if resumed_from is None:
                log.info("starting fresh")
                if self.config.recovery_trials:
                    self.save()  # a checkpoint to roll back to from the first step
            else:
                self.progress.check_data_stream(self.checkpoints.restore_dir)
                log.info("resumed from epoch %d step %d", *resumed_from)
            # After every refusal: a refused rerun leaves the run's settings as they were.
            if is_chief(self.strategy):
                self.settings.keep()
            self.check_progress()
            with PreemptionWatch(self.strategy) as watch:
                epoch, step = self.progress.position
                if epoch < self.config.epochs:
                    # One pipeline for the rest of the run: an epoch continues the
                    # stream where the last one stopped, and the skip to a position
                    # is paid once, on a resume, in the first call: it reports its
                    # progress to the watchdog, which then bounds the skip by how
                    # long it goes without any, not by the first call's bound.
                    batches = self.training_input(
                        epoch, step, self.config.epochs - epoch, self.skip.report
                    )
                    iterator = iter(batches)
                while self.progress.position[0] < self.config.epochs:
                    self.train_epoch(iterator, watch)
            summary = self.finish(resumed_from)
            status = "FINISHED"
            return summary
        except Preempted:
            status = "KILLED"
            raise
        finally:
            self.skip.end(done=False)
            self.profile.stop()
            self.tracker.end(status, summary)
            self.watchdog.stop()
            # A worker's scratch copies are never read: gone however the run ends.
            remove_worker_dir(self.write_dir, self.model_dir)

    def check_progress(self):
        """Record this attempt (the chief) and stop, on every worker alike, when
        the run's last attempts made no progress (training/attempts.py)."""
        stop = self.attempts.start(self.global_step) if self.attempts else None
        with self.watchdog.watching("progress check", "agreeing on the run's progress", A_PEER):
            stopped = any(self.checkpoints.every_worker(int(stop is not None)))
        if stopped:
            raise NoProgress(
                stop or "the run's last attempts made no progress - the chief's log says which"
            )

    def train_epoch(self, iterator, watch):
        epoch, step = self.progress.position
        steps = self.plan.steps_per_epoch
        interval = Interval(self.plan.global_batch_size)
        with Progress(
            f"epoch {epoch + 1}/{self.config.epochs}",
            steps,
            "steps",
            done=step,
            per_unit=("examples", self.plan.global_batch_size),
            shown=is_chief(self.strategy),
        ) as bar:
            while step < steps:
                count = self.next_call_size(step)
                started = time.perf_counter()
                running = f"running epoch {epoch + 1} steps {step + 1}-{step + count}"
                try:
                    with (
                        self.watchdog.watching("training call", running, A_PEER_OR_INPUT),
                        self.profile.call(self.global_step, count),
                    ):
                        loss, metric = self.engine.train(iterator, tf.constant(count))
                        loss = float(loss)  # the host waits here, once per call
                    self.skip.end()  # a resume's skip, if any, ended in the first call
                except tf.errors.OpError as err:
                    # The source tells a bad record (and names its file) from other errors,
                    # by reading the files: bounded by how long it goes without progress.
                    with self.watchdog.watching(
                        "data check", "looking for a corrupt training file", A_STORAGE
                    ):
                        named = self.plan.train.read_error(err, epoch, step, self.watchdog.progress)
                    if named is None:
                        raise
                    raise named from None
                watch.trained()
                blow_up = self.blow_up(loss, epoch, step + count)
                if blow_up:
                    step = self.recover(blow_up, epoch, step + count)
                    interval.reset()  # its steps were undone
                    bar.update(step)
                    continue
                seconds = time.perf_counter() - started
                if self.seconds_to_first_step is None:
                    self.seconds_to_first_step = time.monotonic() - PROCESS_STARTED
                    log.info(
                        "first %d step(s) done %.1f s after start",
                        count,
                        self.seconds_to_first_step,
                    )
                # (The first call also traces the function: it does not count.)
                slow = self.throughput.calls and seconds > SLOW_CALL_SECONDS
                if slow and not self.warned_slow_call:
                    self.warned_slow_call = True
                    log.warning(
                        "a call of %d steps took %.0f s, and a SIGTERM waits for the running"
                        " call before it saves - lower --steps-per-call so a call stays well"
                        " within the grace period before the kill",
                        count,
                        seconds,
                    )
                self.throughput.add(count, seconds)
                interval.add(count, loss, seconds)
                self.progress.add_steps(count, loss, metric)
                step += count
                bar.update(step, loss=loss)
                saved = False
                if step < steps and self.global_step % self.config.checkpoint_every == 0:
                    self.checkpoint(interval)
                    saved = True
                # (At the epoch's last step, the epoch end below saves and checks.)
                if step < steps and self.preemption_requested(watch):
                    if not saved:
                        self.checkpoint(interval)
                    log.info("preempted: saved epoch %d step %d", epoch, step)
                    raise Preempted(f"saved epoch {epoch} step {step}")
        loss, metric = self.progress.epoch_means()
        if self.progress.skipped.numpy() == steps:
            # Skipping batches did not help: the run would end "done" and untrained.
            raise TrainingError(
                f"every step of epoch {epoch + 1} was rolled back and skipped: the loss does"
                " not recover when batches are skipped - check the data for values that are"
                " not finite, or lower --learning-rate; the last good checkpoint is kept"
            )
        self.progress.finish_epoch(loss)
        self.checkpoint(interval)
        self.losses.append(loss)
        self.final_metric = metric
        # Before the evaluation, which can outlast a preemption's grace period.
        if self.preemption_requested(watch):
            log.info("preempted: saved epoch %d step 0", epoch + 1)
            raise Preempted(f"saved epoch {epoch + 1} step 0")
        self.last_eval = self.evaluation()
        eval_loss, eval_metric = self.last_eval
        self.tracker.record(
            self.global_step, {"eval_loss": eval_loss, f"eval_{METRIC_NAME}": eval_metric}
        )
        log_epoch(epoch, self.config.epochs, loss, metric, *self.last_eval)

    def blow_up(self, loss, epoch, step):
        """What is wrong with a call's mean `loss` (ending at `step` of `epoch`),
        or None: not finite, or above --loss-upper-bound."""
        where = f"in epoch {epoch + 1} by step {step}"
        if not math.isfinite(loss):
            return f"the training loss became {loss} {where}"
        bound = self.config.loss_upper_bound
        if bound is not None and loss > bound:
            return f"the training loss {loss:.4g} went above --loss-upper-bound {bound:g} {where}"
        return None

    def recover(self, blow_up, epoch, step):
        """Roll back to the last checkpoint and skip the steps since it, to
        `step` (their batches are not trained again: a blow-up that a batch
        causes would come back on a replay), at most --recovery-trials times in
        the run; returns the step to go on from. The iterator is already at
        `step`, and the position it saves with says so: a resume stays exact."""
        recoveries = int(self.progress.recoveries.numpy())
        trials = self.config.recovery_trials
        if recoveries >= trials:
            recovered = f", with all {trials} --recovery-trials used"
            raise TrainingError(
                f"{blow_up}{recovered if trials else ''} - lower --learning-rate or check"
                f" the data{'' if trials else ', or roll back and skip with --recovery-trials N'};"
                " the last good checkpoint is kept"
            )
        with self.watchdog.watching("restore", "rolling back to a checkpoint", A_PEER_OR_STORAGE):
            self.checkpoints.restore()
        back_epoch, back_step = self.progress.position
        if back_epoch != epoch:
            raise TrainingError(
                f"{blow_up}, and the last checkpoint that restores is in epoch"
                f" {back_epoch + 1}: a rollback stays within an epoch - resume from it"
                " by running the same command again"
            )
        self.progress.rolled_back(step - back_step, recoveries + 1)
        log.warning(
            "%s: rolled back to the checkpoint at step %d and skipped the %d steps since"
            " it (recovery %d of %d)",
            blow_up,
            back_step,
            step - back_step,
            recoveries + 1,
            trials,
        )
        return step

    def checkpoint(self, interval):
        """The replicas' copies checked (and repaired), the interval's scalars
        recorded, then the checkpoint that ends the interval saved. Recorded
        before the save: a kill in between leaves them to the resumed run to
        record again, never a gap."""
        with self.watchdog.watching("sync check", "comparing the replicas' copies", A_PEER):
            spread = self.replica_sync.check()
        scalars = interval.scalars(self.last_learning_rate())
        self.tracker.record(self.global_step, {**scalars, "replica_spread": spread})
        self.save()

    def preemption_requested(self, watch):
        with self.watchdog.watching("preemption check", "agreeing on a SIGTERM", A_PEER):
            return watch.requested()

    def evaluation(self):
        with self.watchdog.watching("evaluation", "evaluating", A_PEER_OR_INPUT):
            return self.evaluate()

    @property
    def global_step(self):
        return int(self.progress.global_step.numpy())

    def last_learning_rate(self):
        """The rate of the optimizer's last update (its schedule is a function of
        the optimizer's own step counter)."""
        return float(self.learning_rate(self.engine.optimizer.iterations - 1))

    def next_call_size(self, step):
        """Steps for the next engine call: up to --steps-per-call, never past the
        epoch's end or the next checkpoint. A function of the position alone, so
        a resumed run groups its steps as the uninterrupted run did."""
        return min(
            self.config.steps_per_call - step % self.config.steps_per_call,
            self.plan.steps_per_epoch - step,
            self.config.checkpoint_every - self.global_step % self.config.checkpoint_every,
        )

    def save(self):
        # The loss guard sees a call's mean loss only: an Inf or NaN weight with a
        # finite loss would become the newest checkpoint, the one a restart loads.
        if not self.weights_finite():
            raise TrainingError(
                f"a weight became Inf or NaN by global step {self.global_step} (the loss"
                " was finite) - lower --learning-rate or check the data; the last good"
                " checkpoint is kept"
            )
        with self.watchdog.watching("save", "saving a checkpoint", A_PEER_OR_STORAGE):
            path = self.checkpoints.save()
        epoch, step = self.progress.position
        log.info(
            "checkpoint: epoch %d step %d (global step %d) in %s",
            epoch,
            step,
            self.global_step,
            path,
        )

    def finish(self, resumed_from):
        """The run's tail: evaluation, the final weights and model, the summary."""
        model = self.engine.model
        trained_here = self.last_eval is not None  # not a rerun of a finished run
        eval_loss, eval_metric = self.last_eval or self.evaluation()
        # --ema-decay: the final model holds the weights' moving averages (the
        # checkpoints keep both); without it, this changes nothing.
        self.engine.optimizer.finalize_variable_values(model.trainable_variables)
        # Keras 3 and tf_keras both save to a URL (through tf.io.gfile) themselves.
        with self.watchdog.watching("final save", "saving the final model", A_PEER_OR_STORAGE):
            model.save_weights(os.path.join(self.write_dir, FINAL_WEIGHTS))
            model.save(os.path.join(self.write_dir, "model.keras"))
        batch_norm_losses = None
        # Not again on a rerun of a finished run: a check that stalled (exit 142)
        # would stall again, restart after restart, on a run whose model is saved.
        if trained_here:
            with self.watchdog.watching(
                "batch-normalization check", "checking the moving averages", A_BUILD_OR_INPUT
            ):
                batch_norm_losses = self.check_batch_norm(
                    model, training_loss=self.progress.final_loss
                )
        summary = {
            "replicas": self.strategy.num_replicas_in_sync,
            "workers": worker_count(self.strategy),
            "loop": self.engine.name,
            "keras_package": KERAS_PACKAGE,
            "per_replica_batch_size": self.plan.per_replica_batch_size,
            "accumulate_steps": self.plan.accumulate_steps,
            "global_batch_size": self.plan.global_batch_size,
            "epochs": self.config.epochs,
            "steps_per_epoch": self.plan.steps_per_epoch,
            "checkpoint_every": self.config.checkpoint_every,
            "peak_learning_rate": self.learning_rate.peak,
            "learning_rate_scaling": scaling_rule(self.config),
            "warmup_steps": self.learning_rate.warmup_steps,
            "ema_decay": self.config.ema_decay,
            "resumed_from": (
                None
                if resumed_from is None
                else {"epoch": resumed_from[0], "step": resumed_from[1]}
            ),
            "global_step": self.global_step,
            "recoveries": int(self.progress.recoveries.numpy()),
            "replica_spread": self.replica_sync.spread,
            "replica_repairs": self.replica_sync.repairs,
            "examples_per_second": self.throughput.examples_per_second(),
            "seconds_to_first_step": self.seconds_to_first_step,
            "losses": self.losses,
            "final_loss": self.progress.final_loss,
            "metric_name": METRIC_NAME,
            "final_metric": self.final_metric,
            "eval_loss": eval_loss,
            "eval_metric": eval_metric,
            "batch_norm_losses": batch_norm_losses,
            "weights_path": os.path.join(self.model_dir, FINAL_WEIGHTS),
            "weights_fingerprint": fingerprint(model.get_weights()),
        }
        log.info("final weights fingerprint: %s", summary["weights_fingerprint"])
        log.info(
            "done: replicas %d, global batch %d, eval loss %.4f, eval %s %.4f",
            summary["replicas"],
            summary["global_batch_size"],
            eval_loss,
            METRIC_NAME,
            eval_metric,
        )
        if self.config.summary_json and is_chief(self.strategy):
            write_summary(self.config.summary_json, summary)
        return summary


class SkipProgress:
    """A resume's skip to its checkpoint's record (in the first call, on the
    input pipeline's thread): each report restarts the watchdog's wait, and on
    the chief a progress display opens at the first and closes with the call."""

    def __init__(self, watchdog, shown):
        self.watchdog, self.shown = watchdog, shown
        self.bar, self.ended = None, False

    def report(self, skipped, total):
        self.watchdog.progress()
        if self.ended:
            return  # a report the pipeline sent after the run stopped in the skip
        if self.bar is None:
            self.bar = Progress("resume: skipping", total, "records", shown=self.shown)
        self.bar.update(skipped)

    def end(self, done=True):
        """The skip is over (`done`), or the run stopped in it."""
        bar, self.bar, self.ended = self.bar, None, True
        if bar is not None and done:
            bar.update(bar.total)
            bar.close()
        elif bar is not None:
            bar.abandon()


class Throughput:
    """Training examples per second, steady state: the first call of a process
    (tracing, warm-up) is left out when there are others."""

    def __init__(self, global_batch_size):
        self.global_batch_size = global_batch_size
        self.calls = []

    def add(self, steps, seconds):
        self.calls.append((steps, seconds))

    def examples_per_second(self):
        calls = self.calls[1:] or self.calls
        seconds = sum(seconds for _, seconds in calls)
        if not seconds:
            return None
        return self.global_batch_size * sum(steps for steps, _ in calls) / seconds


class Profile:
    """--profile-steps A:B: a TensorBoard profile (LOG_DIR/plugins/profile) of
    the engine calls that run global steps A to B, each call named "train" with
    its first step's number. Whole calls: --steps-per-call 1 profiles exactly
    A to B."""

    def __init__(self, window, log_dir):
        self.window = window  # (A, B), or None: no profile
        self.log_dir = log_dir
        self.running = False

    @contextlib.contextmanager
    def call(self, global_step, count):
        """Around the call that runs global steps global_step + 1 to global_step + count."""
        if self.window is None or not self.covers(global_step, count):
            yield
            return
        if not self.running:
            tf.profiler.experimental.start(self.log_dir)
            self.running = True
        with tf.profiler.experimental.Trace("train", step_num=global_step + 1, _r=1):
            yield
        if global_step + count >= self.window[1]:
            self.stop()

    def covers(self, global_step, count):
        """Whether steps global_step + 1 .. global_step + count meet the window."""
        first, last = self.window
        return first <= global_step + count and global_step + 1 <= last

    def stop(self):
        if self.running:
            tf.profiler.experimental.stop()
            self.running = False
            log.info("profile of steps %d-%d in %s/plugins/profile", *self.window, self.log_dir)


class Interval:
    """What happened since the last checkpoint: the steps' mean loss and their
    examples per second."""

    def __init__(self, global_batch_size):
        self.global_batch_size = global_batch_size
        self.reset()

    def reset(self):
        self.steps, self.loss_sum, self.seconds = 0, 0.0, 0.0

    def add(self, steps, loss, seconds):
        self.steps += steps
        self.loss_sum += steps * loss
        self.seconds += seconds

    def scalars(self, learning_rate):
        """The interval's loss, learning rate and examples per second (none for
        an interval of no steps), and a new interval."""
        scalars = {}
        if self.steps:
            scalars = {
                "loss": self.loss_sum / self.steps,
                "learning_rate": learning_rate,
                "examples_per_second": self.global_batch_size
                * self.steps
                / max(self.seconds, 1e-9),
            }
        self.reset()
        return scalars


class PreemptionWatch:
    """SIGTERM (what Kubernetes and Slurm send before they kill), once the run
    holds steps a save would keep, asks it to save and stop at the next step
    boundary. The workers agree at every boundary (strategy.make_any_worker), so
    a SIGTERM to one of them stops all of them at the same step. Before the
    first trained call and after the block (the run's tail), a process that
    catches SIGTERM from its start (the commands: distribute/preemption.py) exits 143 at
    once: the last checkpoint holds everything."""

    def __init__(self, strategy):
        self.any_worker = make_any_worker(strategy)
        self.previous = None

    def __enter__(self):
        # Used as a library (a notebook, a test), the process has no handler of its
        # own: one for the run's duration. Signal handlers can only be set from the
        # main thread (not a test runner's worker thread: there SIGTERM keeps its effect).
        if not preemption.notice.caught_from_start:
            preemption.notice.received = False
            if threading.current_thread() is threading.main_thread():
                self.previous = signal.signal(signal.SIGTERM, self.on_sigterm)
        return self

    def __exit__(self, exc_type, exc_value, traceback):
        preemption.notice.unsaved_steps = False
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)
        # A SIGTERM after the last boundary (the last evaluation): nothing is left
        # to save, and the run's tail would outlast the grace period.
        notice = preemption.notice
        if exc_type is None and notice.received and notice.caught_from_start:
            preemption.exit_with_nothing_to_save()

    @staticmethod
    def on_sigterm(signum, frame):
        preemption.notice.received = True
        log.warning(preemption.SAVING_FIRST)

    @staticmethod
    def trained():
        """A call trained steps: a SIGTERM now saves them first."""
        preemption.notice.unsaved_steps = True

    def requested(self):
        return self.any_worker(preemption.notice.received)


def make_finite_check(variables):
    """() -> whether every value of `variables` is finite: one reduction in one
    function call, one value read by the host (once per save, not per step)."""

    @tf.function
    def all_finite():
        return tf.reduce_all([tf.reduce_all(tf.math.is_finite(v)) for v in variables])

    return lambda: bool(all_finite())


def log_epoch(epoch, epochs, loss, metric, eval_loss, eval_metric):
    log.info(
        "epoch %d/%d: loss %.4f %s %.4f, eval loss %.4f eval %s %.4f",
        epoch + 1,
        epochs,
        loss,
        METRIC_NAME,
        metric,
        eval_loss,
        METRIC_NAME,
        eval_metric,
    )


def write_summary(path, summary):
    """Write the summary JSON atomically (a reader never sees half a file), to a
    local path or a URL."""
    tf.io.gfile.makedirs(os.path.dirname(path) or ".")
    write_atomically(path, json.dumps(summary, indent=2) + "\n")
