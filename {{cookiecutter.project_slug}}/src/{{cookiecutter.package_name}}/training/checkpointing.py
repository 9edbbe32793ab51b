"""The run's position and its checkpoints, and where each worker writes.

A checkpoint holds the model, the optimizer, the state of the random layers'
generators (Dropout masks, noise, augmentation layers) and the run's position:
the epoch, the steps done in it, the global step, and the epoch's loss and
metric sums so far. Together with a data order that is a function of (seed,
epoch, step), that is everything a restarted run needs to continue exactly where
the saved one was.
"""

import hashlib
import json
import logging
import math
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
import tensorflow as tf
from google.protobuf import text_format
from tensorflow.core.protobuf.trackable_object_graph_pb2 import TrackableObjectGraph

# The state file's format: TensorFlow's own, which it offers no public name for.
from tensorflow.python.training.checkpoint_state_pb2 import CheckpointState

from {{ cookiecutter.package_name }} import TrainerError, TransientError, first_line, is_remote
{%- if cookiecutter.distribution == "multi_worker" %}
from {{ cookiecutter.package_name }}.distribute.strategy import is_chief
{%- endif %}

log = logging.getLogger(__name__)

# Refuse to start with less room than this for checkpoints and the final model.
MIN_FREE_BYTES = 64 * 2**20
CHECKPOINT_DIR = "checkpoints"
# The finished run's weights (what `export` reads).
FINAL_WEIGHTS = "final.weights.h5"
# The newest checkpoints kept: a save killed half-way never replaces the last good
# one, and a newest one that cannot be read falls back to the one before it.
KEEP_CHECKPOINTS = 2
# What a checkpoint that does not fit or cannot be read raises on restore (a data
# file cut short raises IndexError, TensorFlow's OutOfRange through its reader).
RESTORE_ERRORS = (AssertionError, ValueError, IndexError, tf.errors.OpError)
# What storage that did not answer this time raises (a GCS or NFS hiccup): the
# same checkpoint is read again, never passed over as damaged.
TRANSIENT_ERRORS = (tf.errors.UnavailableError, tf.errors.DeadlineExceededError)
# Reads of a checkpoint while its storage does not answer, RETRY_SECONDS apart
# at first, then twice as long each time: half a minute in all, what a bucket's
# or an NFS server's brief outage takes, before the run stops to be restarted.
READ_ATTEMPTS = 6
RETRY_SECONDS = 1.0
# What a worker that could not restore gathers in place of a step: its storage
# did not answer, it could not read the checkpoints, another error.
UNAVAILABLE, UNREADABLE, REFUSED = -3, -2, -4
# What fixes the data stream besides the position: a run resumed with other
# values would silently train on other examples than the saved run was going to.
DATA_STREAM_KEYS = ("global_batch_size", "workers", "seed", "steps_per_pass", "steps_per_epoch")
DERIVED_KEYS = ("steps_per_pass", "steps_per_epoch")
# The checkpoint's layout, saved in it: raised when an entry is added. A run
# outlives an update of its project (`cruft update` mid-run): a checkpoint of an
# earlier layout resumes, each entry it lacks left as this run starts it, with
# one line saying so. A later layout (the project was rolled back) is refused.
LAYOUT = 2
# The entries a checkpoint may lack, as they were added, and what stands in for
# each (and `layout`: 1 when it lacks that). The model, the optimizer and the
# position are in every checkpoint, and restore strictly.
STAND_INS = {
    **dict.fromkeys(DATA_STREAM_KEYS, "the data stream is not compared with the saved run's"),
    "recoveries": "no loss blow-up recovered from so far",
    "skipped": "no step skipped by a rollback in this epoch so far",
    "model_variables": "the model's variables are matched by the restore alone",
    "random_state": "the random layers' generators start again from --seed",
}


class CheckpointError(TrainerError):
    pass


class StorageUnavailable(TransientError):
    """The checkpoints' storage did not answer READ_ATTEMPTS reads, or a worker
    could not read what its peers read: the run stops to be restarted, rather
    than pass over a checkpoint that is not damaged."""


class Progress:
    """Where the run is, and the data stream it is in (`data_stream`: a value for
    each of DATA_STREAM_KEYS), as variables saved in every checkpoint."""

    def __init__(self, strategy, data_stream):
        self.data_stream = dict(data_stream)
        with strategy.scope():
            self.saved_data_stream = {
                key: self._variable(self.data_stream[key], tf.int64, key)
                for key in DATA_STREAM_KEYS
            }
            self.epoch = self._variable(0, tf.int64, "epoch")  # the epoch under way
            self.step = self._variable(0, tf.int64, "step")  # steps done in it
            self.global_step = self._variable(0, tf.int64, "global_step")
            # The epoch's sums of per-step loss and metric so far.
            self.loss_sum = self._variable(0.0, tf.float64, "loss_sum")
            self.metric_sum = self._variable(0.0, tf.float64, "metric_sum")
            # The loss of the last finished epoch (a finished run restarted reports it).
            self.last_loss = self._variable(math.nan, tf.float64, "last_loss")
            # Loss blow-ups recovered from in the run, and the epoch's steps skipped
            # by them (rolled back and not trained: controller.recover).
            self.recoveries = self._variable(0, tf.int64, "recoveries")
            self.skipped = self._variable(0, tf.int64, "skipped")

    @staticmethod
    def _variable(value, dtype, name):
        return tf.Variable(value, dtype=dtype, trainable=False, name=name)

    def variables(self):
        position = {
            name: getattr(self, name)
            for name in (
                "epoch",
                "step",
                "global_step",
                "loss_sum",
                "metric_sum",
                "last_loss",
                "recoveries",
                "skipped",
            )
        }
        return {**position, **self.saved_data_stream}

    def check_data_stream(self, where):
        """After a restore: refuse a run whose data stream is not the saved one's."""
        saved = {key: int(variable.numpy()) for key, variable in self.saved_data_stream.items()}
        changed = [key for key in DATA_STREAM_KEYS if saved[key] != self.data_stream[key]]
        # Steps per pass and per epoch follow from the global batch and the workers:
        # name them only when they changed on their own (the data, --steps-per-epoch).
        changed = [key for key in changed if key not in DERIVED_KEYS] or changed
        if changed:
            was = ", ".join(f"{key.replace('_', ' ')} {saved[key]}" for key in changed)
            now = ", ".join(f"{key.replace('_', ' ')} {self.data_stream[key]}" for key in changed)
            raise CheckpointError(
                f"the checkpoints in {where} were written with {was}; this run has {now}"
                " - resume with the same settings (the data position depends on them; on"
                " another replica count keep the global batch with --per-replica-batch-size),"
                " or train into a new --model-dir"
            )

    @property
    def position(self):
        """(epoch, step within it): where training continues."""
        return int(self.epoch.numpy()), int(self.step.numpy())

    @property
    def final_loss(self):
        loss = float(self.last_loss.numpy())
        return None if math.isnan(loss) else loss

    def add_steps(self, steps, mean_loss, mean_metric):
        """`steps` more steps whose mean loss and metric were these."""
        self.step.assign_add(steps)
        self.global_step.assign_add(steps)
        self.loss_sum.assign_add(steps * float(mean_loss))
        self.metric_sum.assign_add(steps * float(mean_metric))

    def rolled_back(self, skipped_steps, recoveries):
        """After a rollback to a checkpoint: `skipped_steps` more steps, not
        trained, and `recoveries` in the run so far."""
        self.step.assign_add(skipped_steps)
        self.global_step.assign_add(skipped_steps)
        self.skipped.assign_add(skipped_steps)
        self.recoveries.assign(recoveries)

    def epoch_means(self):
        """The epoch's mean loss and metric over the steps it trained."""
        steps = int(self.step.numpy()) - int(self.skipped.numpy())
        if steps == 0:
            return math.nan, math.nan
        return float(self.loss_sum.numpy()) / steps, float(self.metric_sum.numpy()) / steps

    def finish_epoch(self, loss):
        self.epoch.assign_add(1)
        self.step.assign(0)
        self.skipped.assign(0)
        self.loss_sum.assign(0.0)
        self.metric_sum.assign(0.0)
        self.last_loss.assign(loss)


class Checkpoints:
    """Saves to `write_dir`/checkpoints and restores from `model_dir`/checkpoints
    (the chief's, for every worker), keeping the newest two.

    A save is atomic: TensorFlow writes the data files first and replaces the
    small `checkpoint` state file last, so a kill during a save leaves the
    previous checkpoint as the latest.

    `every_worker` (strategy.make_every_worker) gathers a value from every
    worker: the workers compare the steps they restored, since each reads the
    checkpoints alone and variables are broadcast only when they are created.
    """

    def __init__(self, trackables, progress, model_dir, write_dir, every_worker):
        self.progress = progress
        self.every_worker = every_worker
        # What the model's variables are, saved with them and compared on restore.
        self.model_variables = variables_signature(trackables["model"])
        with tf.device("/cpu:0"):
            self.saved_model_variables = tf.Variable(self.model_variables, trainable=False)
            self.layout = tf.Variable(LAYOUT, dtype=tf.int64, trainable=False)
        self.entries = {
            **trackables,
            "model_variables": self.saved_model_variables,
            **progress.variables(),
            "layout": self.layout,
        }
        self.checkpoint = tf.train.Checkpoint(**self.entries)
        self.model_dir = model_dir
        self.restore_dir = os.path.join(model_dir, CHECKPOINT_DIR)
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, os.path.join(write_dir, CHECKPOINT_DIR), max_to_keep=KEEP_CHECKPOINTS
        )

    def restore(self, check_resumption=None):
        """Restore the newest kept checkpoint that restores, the same on every
        worker; return its position, or None. `check_resumption` (a run's first
        restore) runs first when there is one. A newest one that cannot be read
        (a data file cut short by a full disk or a bad copy) falls back to the
        one before it, with a warning; when none restores (a changed model), the
        newest's error is the message.

        Each worker reads the checkpoints alone: one that fails says so to the
        others, at the gather every worker reaches, and every worker stops with
        its error, rather than leave them waiting in the gather for the watchdog.
        """
        paths = []

        def newest():
            paths.extend(kept_checkpoints(self.model_dir))
            if paths and check_resumption is not None:
                check_resumption()
            return self.newest_that_restores(paths)

        restored, steps = self.on_every_worker(newest)
        if len(set(steps)) > 1:
            self.agree(restored, paths, steps)
        return None if restored is None else self.progress.position

    def on_every_worker(self, restore):
        """Run `restore` (-> the path it restored, or None) on every worker; return
        that path and the step each worker restored. A worker whose `restore`
        raises says so at the gather, and every worker raises."""
        try:
            restored = restore()
            outcome, failure = self.restored_step(restored), None
        except StorageUnavailable as err:
            outcome, failure = UNAVAILABLE, err
        except CheckpointError as err:  # it could not read them
            outcome, failure = UNREADABLE, err
        except Exception as err:  # any other error: the others are told, then it is raised
            outcome, failure = REFUSED, err
        steps = self.every_worker(outcome)
        refused = [worker for worker, step in enumerate(steps) if step == UNREADABLE]
        read = [worker for worker, step in enumerate(steps) if step >= 0]
        if refused and read:
            # Its peers read the same checkpoints: that worker's storage is at
            # fault, not the model, and a restart may read them.
            if failure is not None:
                log.warning("%s", failure)
            raise StorageUnavailable(
                f"worker {refused[0]} could not read the checkpoints in {self.restore_dir}"
                f" that worker {read[0]} restored: its storage is at fault, not the model"
                " - its log says why; restarting the job reads them again"
            )
        if failure is not None:
            raise failure
        failures = (UNAVAILABLE, UNREADABLE, REFUSED)
        failed = [worker for worker, step in enumerate(steps) if step in failures]
        if failed:
            worker = failed[0]
            error = StorageUnavailable if steps[worker] == UNAVAILABLE else CheckpointError
            raise error(
                f"worker {worker} could not restore the checkpoints in {self.restore_dir}"
                " - its log says why"
            )
        return restored, steps

    def newest_that_restores(self, paths):
        """Restore the newest of `paths` that restores, or the one before it;
        return its path (None when there are none)."""
        if not paths:
            return None
        *older, newest = paths
        try:
            self.read(newest)
            return newest
        except TRANSIENT_ERRORS as err:
            raise unavailable(newest, err) from None
        except RESTORE_ERRORS as err:
            if not (older and self.restores(older[-1])):
                raise CheckpointError(
                    f"the checkpoint {newest} does not fit this model and optimizer"
                    f" ({first_line(err, 200)})"
                    " - train into a new --model-dir, or delete its checkpoints/ to start"
                    " over"
                ) from None
            log.warning(
                "the newest checkpoint %s cannot be restored (%s): resuming from the"
                " previous one, %s",
                newest,
                first_line(err, 200),
                older[-1],
            )
            return older[-1]

    def agree(self, restored, paths, steps):
        """Make every worker hold the same checkpoint: when one could not read the
        newest (`steps`: the step each restored), all go back to the newest that
        every worker restored (the oldest step among them); refuse, naming each
        worker's, when that fails."""
        if min(steps) < 0:
            raise CheckpointError(
                f"the workers found different checkpoints in {self.restore_dir}"
                f" ({describe_steps(steps)}) - give every worker the same shared --model-dir"
            )
        common = min(steps)
        path = next((path for path in paths if path.endswith(f"-{common}")), None)

        def common_one():
            if self.restored_step(restored) == common:
                return restored
            return path if path is not None and self.restores(path) else None

        _, agreed = self.on_every_worker(common_one)
        if len(set(agreed)) != 1:
            raise StorageUnavailable(
                f"the workers restored different checkpoints ({describe_steps(steps)}) and"
                f" not every worker can read the one at step {common}: their storage is at"
                " fault - restarting the job reads them again (should it recur, check the"
                f" storage of {self.restore_dir})"
            )
        log.warning(
            "the workers restored different checkpoints (%s): every worker resumes from step %d",
            describe_steps(steps),
            common,
        )

    def restored_step(self, restored):
        """The global step of the checkpoint restored, -1 for none."""
        return -1 if restored is None else int(self.progress.global_step.numpy())

    def read(self, path):
        """Restore every variable from the checkpoint at `path`. Its files are
        looked at first, again while their storage does not answer: TensorFlow's
        checkpoint reader reports that as an unknown error, as it does damage."""
        retried(look_at_files, path)
        held, layout = retried(layout_of, path)
        if layout > LAYOUT:
            raise CheckpointError(
                f"the checkpoint {path} has layout {layout}, and this version of the project"
                f" reads layouts up to {LAYOUT}: a later version wrote it - update the"
                " project, or train into a new --model-dir"
            )
        missing = [name for name in self.entries if name not in held and name != "layout"]
        strict = [name for name in missing if name not in STAND_INS]
        if strict:
            raise AssertionError(f"it has no {', '.join(strict)}")
        present = {name: entry for name, entry in self.entries.items() if name in held}
        tf.train.Checkpoint(**present).restore(path).assert_consumed()
        self.layout.assign(LAYOUT)  # what the next save writes
        if missing:
            log.warning(
                "the checkpoint %s (layout %d; this project writes %d) predates %s: %s",
                path,
                layout,
                LAYOUT,
                ", ".join(missing),
                "; ".join(dict.fromkeys(STAND_INS[name] for name in missing)),
            )
        elif layout < LAYOUT:
            log.info(
                "the checkpoint %s is of layout %d: the next saves write %d", path, layout, LAYOUT
            )
        if "model_variables" not in held:
            return
        saved = self.saved_model_variables.numpy().decode()
        if saved != self.model_variables:
            # assert_consumed passes a checkpoint of a model with a layer more: its
            # variables are saved through the optimizer's list, which the model
            # without it matches in part.
            raise AssertionError(
                describe_difference(json.loads(saved), json.loads(self.model_variables))
            )

    def restores(self, path):
        """Whether the checkpoint at `path` restores every variable (it then has)."""
        try:
            self.read(path)
        except TRANSIENT_ERRORS as err:
            raise unavailable(path, err) from None
        except RESTORE_ERRORS:
            return False
        return True

    def save(self):
        """Save at the current global step (its number names the checkpoint).
        Storage that does not answer stops the run retryably: the restart saves
        again from the last checkpoint (told apart from a lost peer's error)."""
        step = int(self.progress.global_step.numpy())
        try:
            return self.manager.save(checkpoint_number=step)
        except TRANSIENT_ERRORS as err:
            raise StorageUnavailable(
                f"the storage did not answer the save of global step {step} to"
                f" {self.manager.directory} ({first_line(err, 200)}) - restarting the job"
                " saves again from the last checkpoint"
            ) from None


def variables_signature(model):
    """The model's variables as a checkpoint records them: each one's shape and
    dtype, in order (their names are numbered per process), as JSON."""
    return json.dumps(
        [[list(variable.shape), tf.as_dtype(variable.dtype).name] for variable in model.weights]
    )


def describe_difference(saved, model):
    """The first variable where the checkpoint's model (`saved`) and this one
    (`model`) differ, in words."""
    common = min(len(saved), len(model))
    index = next((i for i in range(common) if saved[i] != model[i]), common)
    there = saved[index] if index < len(saved) else "none"
    here = model[index] if index < len(model) else "none"
    return (
        f"its model has {len(saved)} variables, this one {len(model)}; variable {index}:"
        f" {there} there, {here} here"
    )


def kept_checkpoints(model_dir):
    """The paths of the checkpoints kept in `model_dir`, oldest first. The state
    file is looked at through tf.io.gfile, again while its storage does not
    answer: TensorFlow's own reader (get_checkpoint_state) takes any error for
    "no checkpoint", and the run would start afresh over its checkpoints."""
    directory = os.path.join(model_dir, CHECKPOINT_DIR)
    state_file = os.path.join(directory, "checkpoint")
    try:
        if not retried(tf.io.gfile.exists, state_file):
            return []
        return retried(read_state, directory)
    except TRANSIENT_ERRORS as err:
        raise unavailable(state_file, err) from None


def read_state(directory):
    """The paths of the checkpoints that the state file in `directory` (which
    exists) lists, oldest first (a file written by hand may name the newest
    only). Read once:
    TensorFlow's own reader (get_checkpoint_state) reads it again and takes a
    storage error there for a damaged file."""
    state_file = os.path.join(directory, "checkpoint")
    with tf.io.gfile.GFile(state_file, "rb") as handle:
        data = handle.read()
    state = CheckpointState()
    try:
        text_format.Parse(data.decode("utf-8"), state)
    except (UnicodeDecodeError, text_format.ParseError):
        state.Clear()
    if not state.model_checkpoint_path:
        raise CheckpointError(
            f"the checkpoint state file {state_file} cannot be read as one"
            f" ({data[:80].decode('utf-8', 'replace')!r}) - rewrite it as the line"
            ' model_checkpoint_path: "ckpt-N", for the newest ckpt-N.index beside it'
        )
    # Paths are relative to the directory, as TensorFlow writes them.
    return [
        path if os.path.isabs(path) or is_remote(path) else os.path.join(directory, path)
        for path in state.all_model_checkpoint_paths or [state.model_checkpoint_path]
    ]


def layout_of(path):
    """The names of the entries the checkpoint at `path` holds (its root's
    children in TensorFlow's object graph: model, optimizer, epoch, ...), and
    its layout (1: written before checkpoints recorded it)."""
    # Not tf.train.load_checkpoint: on some file systems (ram://) it takes the
    # checkpoint's prefix for a directory and looks for a state file in it.
    reader = tf.compat.v1.train.NewCheckpointReader(path)
    graph = TrackableObjectGraph.FromString(reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
    held = {child.local_name for child in graph.nodes[0].children}
    if "layout" not in held:
        return held, 1
    return held, int(reader.get_tensor("layout/.ATTRIBUTES/VARIABLE_VALUE"))


def look_at_files(path):
    """The storage's own (typed) error, if any, for the files of the checkpoint at
    `path`."""
    for name in [f"{path}.index", *tf.io.gfile.glob(f"{path}.data-*")]:
        tf.io.gfile.stat(name)


def unavailable(path, err):
    return StorageUnavailable(
        f"the storage did not answer {READ_ATTEMPTS} reads of {path} ({first_line(err, 200)})"
        " - restarting the job reads it again"
    )


def retried(read, *args):
    """read(*args), again after a TRANSIENT_ERRORS one, at most READ_ATTEMPTS
    times in all (the last error is raised)."""
    for attempt in range(READ_ATTEMPTS):
        try:
            return read(*args)
        except TRANSIENT_ERRORS as err:
            if attempt + 1 == READ_ATTEMPTS:
                raise
            seconds = RETRY_SECONDS * 2**attempt
            log.warning(
                "the checkpoint storage did not answer (%s): reading again in %.0f s",
                first_line(err, 200),
                seconds,
            )
            time.sleep(seconds)


def describe_steps(steps):
    """'worker 0 step 6, worker 1 none' for the steps each worker restored."""
    return ", ".join(
        f"worker {index} {'none' if step < 0 else f'step {step}'}"
        for index, step in enumerate(steps)
    )


def prepare_model_dir(path):
    """Create the model directory and prove it takes a write, before training.
    Returns it as a string: a local path made absolute, a URL as given."""
    if is_remote(path):
        return prepare_remote_dir(str(path).rstrip("/"))
    model_dir = Path(path).resolve()
    try:
        model_dir.mkdir(parents=True, exist_ok=True)
        # A probe of its own: every worker of a job checks the same directory at once.
        with tempfile.NamedTemporaryFile(dir=model_dir, prefix=".write-test-") as probe:
            probe.write(b"0" * 4096)
            probe.flush()
    except OSError as err:
        raise CheckpointError(
            f"cannot write to the model directory {model_dir} ({err.strerror})"
            " - pass a writable --model-dir"
        ) from None
    free = shutil.disk_usage(model_dir).free
    if free < MIN_FREE_BYTES:
        raise CheckpointError(
            f"only {free // 2**20} MiB free for the model directory {model_dir}: checkpoints"
            f" need at least {MIN_FREE_BYTES // 2**20} MiB - free some space or pass"
            " another --model-dir"
        )
    return str(model_dir)


def prepare_remote_dir(model_dir):
    """prepare_model_dir for a URL: the same probe through tf.io.gfile, and no
    free-space check (a bucket has no free space to ask about)."""
    probe = os.path.join(model_dir, f".write-test-{uuid.uuid4().hex}")
    try:
        tf.io.gfile.makedirs(model_dir)
        with tf.io.gfile.GFile(probe, "wb") as handle:
            handle.write(b"0" * 4096)
        tf.io.gfile.remove(probe)
    except TRANSIENT_ERRORS as err:
        # Retryable; not a raw UnavailableError, which reads as a lost peer's.
        raise StorageUnavailable(
            f"the storage of the model directory {model_dir} did not answer"
            f" ({first_line(err, 200)}) - restarting the job tries again"
        ) from None
    except tf.errors.OpError as err:
        raise CheckpointError(
            f"cannot write to the model directory {model_dir} ({first_line(err.message)})"
            " - pass a writable --model-dir"
        ) from None
    return model_dir


def fingerprint(weights):
    """A short hash of a list of weight arrays: equal fingerprints, bit-identical
    weights (replicas, workers, reruns)."""
    digest = hashlib.sha256()
    for array in weights:
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()[:16]
{% include "training/checkpointing/" ~ cookiecutter.distribution ~ ".py" %}