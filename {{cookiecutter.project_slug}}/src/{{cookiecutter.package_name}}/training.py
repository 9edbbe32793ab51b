"""Run one training job: plan the data for the strategy, train, evaluate, summarize."""

import dataclasses
import hashlib
import json
import logging
import math
import shutil
import tempfile
from pathlib import Path
{% if cookiecutter.keras_package == "keras3" %}
import keras
import numpy as np
import tensorflow as tf
{%- else %}
import numpy as np
import tensorflow as tf
import tf_keras as keras
{%- endif %}

from {{ cookiecutter.package_name }} import TrainerError
from {{ cookiecutter.package_name }}.data import (
    count_examples,
    load_examples,
    steps_per_epoch_for,
)
{%- if cookiecutter.mixed_precision == "yes" %}
from {{ cookiecutter.package_name }}.model import set_precision_policy
{%- endif %}
from {{ cookiecutter.package_name }}.strategy import (
    describe,
    global_batch_size,
{%- if cookiecutter.distribution == "multi_worker" %}
    is_chief,
{%- endif %}
    worker_count,
)

log = logging.getLogger(__name__)

KERAS_PACKAGE = "{{ cookiecutter.keras_package }}"
# Refuse to start with less room than this for checkpoints and the final model.
MIN_FREE_BYTES = 64 * 2**20
METRIC_NAME = "accuracy"


class TrainingError(TrainerError):
    pass


@dataclasses.dataclass
class RunPlan:
    """What the data looks like for this strategy, checked before training."""

    global_batch_size: int
    steps_per_epoch: int
    train_examples: tf.data.Dataset
    eval_examples: tf.data.Dataset
    # An explicit steps_per_epoch streams the data (repeated) across epochs.
    repeat: bool


@dataclasses.dataclass
class TrainingResult:
    # The epochs this run trained (none when a resumed run had nothing left).
    losses: list
    final_loss: float | None
    # None when every epoch was done before (a resumed, finished run).
    final_metric: float | None
    eval_loss: float
    eval_metric: float
    weights_path: str
    # Equal fingerprints: bit-identical final weights (replicas, workers, reruns).
    weights_fingerprint: str


def plan_run(config, strategy):
    batch = global_batch_size(strategy, config.per_replica_batch_size)
    train, evaluation = load_examples(config, worker_count(strategy))
    num_train = count_examples(train, batch, config.steps_per_epoch, "training")
    count_examples(evaluation, batch, split="evaluation")
    return RunPlan(
        global_batch_size=batch,
        steps_per_epoch=steps_per_epoch_for(num_train, batch, config.steps_per_epoch),
        train_examples=train,
        eval_examples=evaluation,
        repeat=config.steps_per_epoch is not None,
    )


def prepare_model_dir(path):
    """Create the model directory and prove it takes a write, before training."""
    model_dir = Path(path).resolve()
    try:
        model_dir.mkdir(parents=True, exist_ok=True)
        # A probe of its own: every worker of a job checks the same directory at once.
        with tempfile.NamedTemporaryFile(dir=model_dir, prefix=".write-test-") as probe:
            probe.write(b"0" * 4096)
            probe.flush()
    except OSError as err:
        raise TrainingError(
            f"cannot write to the model directory {model_dir} ({err.strerror})"
            " - pass a writable --model-dir"
        ) from None
    free = shutil.disk_usage(model_dir).free
    if free < MIN_FREE_BYTES:
        raise TrainingError(
            f"only {free // 2**20} MiB free for the model directory {model_dir}: checkpoints"
            f" need at least {MIN_FREE_BYTES // 2**20} MiB - free some space or pass"
            " another --model-dir"
        )
    return model_dir
{%- if cookiecutter.distribution == "multi_worker" %}


def worker_dir(model_dir, strategy):
    """Where this worker writes: the model directory on the chief, a scratch
    directory of its own elsewhere (every worker must take part in saving; only
    the chief's copy is kept). A restarted worker starts its scratch afresh."""
    if is_chief(strategy):
        return model_dir
    resolver = strategy.cluster_resolver
    scratch = model_dir / f".{resolver.task_type}-{resolver.task_id}"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    return scratch


def remove_worker_dir(path, model_dir):
    if Path(path) != Path(model_dir):
        shutil.rmtree(path, ignore_errors=True)
{%- endif %}
{%- if cookiecutter.mixed_precision == "yes" %}


def apply_precision_policy(config):
    """The policy must be set before the model is built; float32 is for checks."""
    if config.mixed_precision:
        set_precision_policy()
    else:
        keras.mixed_precision.set_global_policy("float32")
{%- endif %}


def fingerprint(weights):
    """A short hash of a list of weight arrays."""
    digest = hashlib.sha256()
    for array in weights:
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()[:16]


class Progress:
    """The run's position, saved in every checkpoint: the next epoch, and the loss
    of the last finished epoch (a resumed run with nothing left still reports it)."""

    def __init__(self, strategy):
        with strategy.scope():
            self.next_epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
            self.last_loss = tf.Variable(
                math.nan, dtype=tf.float64, trainable=False, name="last_loss"
            )

    @property
    def first_epoch(self):
        return int(self.next_epoch.numpy())

    @property
    def final_loss(self):
        loss = float(self.last_loss.numpy())
        return None if math.isnan(loss) else loss

    def epoch_done(self, epoch, loss):
        self.next_epoch.assign(epoch + 1)
        self.last_loss.assign(loss)

    def checkpoint(self, model, optimizer):
        """What every epoch saves: the model, the optimizer and this progress."""
        return tf.train.Checkpoint(
            model=model, optimizer=optimizer, epoch=self.next_epoch, last_loss=self.last_loss
        )


def restore_latest(checkpoint, progress, model_dir, write_dir):
    """Restore the last complete checkpoint, if any, and return the manager that
    saves the next ones (one per epoch, to write_dir/backup).

    Every worker restores from model_dir/backup (the chief's), so all resume at
    the same epoch. A save interrupted by a kill never becomes the latest: the
    checkpoint state file is replaced atomically after the data is written.
    """
    manager = tf.train.CheckpointManager(checkpoint, str(write_dir / "backup"), max_to_keep=2)
    latest = tf.train.latest_checkpoint(str(model_dir / "backup"))
    if latest:
        try:
            checkpoint.restore(latest).assert_consumed()
        except (AssertionError, ValueError, tf.errors.OpError) as err:
            raise TrainingError(
                f"the checkpoint {latest} does not fit this model and optimizer"
                f" ({first_line(err, 200)})"
                " - train into a new --model-dir, or delete its backup/ to start over"
            ) from None
        log.info("resumed from epoch %d step 0", progress.first_epoch)
    else:
        log.info("starting fresh")
    return manager


def first_line(err, limit=300):
    """The first line of an error's message (for one-line errors), or "no message"."""
    lines = str(err).strip().splitlines()
    return lines[0][:limit] if lines else "no message"


def check_finite(loss, epoch, step):
    """Stop at a NaN or Inf loss, before the epoch's checkpoint is written."""
    if not math.isfinite(loss):
        raise TrainingError(
            f"the training loss became {loss} in epoch {epoch + 1} by step {step}"
            " - lower --learning-rate or check the data; the last good checkpoint"
            " is kept"
        )


def log_epoch(epoch, epochs, loss, metric):
    log.info("epoch %d/%d: loss %.4f %s %.4f", epoch + 1, epochs, loss, METRIC_NAME, metric)


def train(config, strategy):
    """Train with `strategy` and return the run's summary (a dict)."""
    for line in describe(strategy, config.per_replica_batch_size):
        log.info(line)
    plan = plan_run(config, strategy)
    log.info("steps per epoch: %d", plan.steps_per_epoch)
    model_dir = prepare_model_dir(config.model_dir)
{%- if cookiecutter.mixed_precision == "yes" %}
    apply_precision_policy(config)
{%- endif %}
    keras.utils.set_random_seed(config.seed)
    # Imported here: the loop modules build on this one.
{%- if cookiecutter.training_loop == "both" %}
    if config.loop == "fit":
        from {{ cookiecutter.package_name }}.train_fit import train_with_fit as run_loop
    else:
        from {{ cookiecutter.package_name }}.train_custom import train_with_custom_loop as run_loop
    result = run_loop(config, strategy, plan, model_dir)
    loop = config.loop
{%- elif cookiecutter.training_loop == "fit" %}
    from {{ cookiecutter.package_name }}.train_fit import train_with_fit

    result = train_with_fit(config, strategy, plan, model_dir)
    loop = "fit"
{%- else %}
    from {{ cookiecutter.package_name }}.train_custom import train_with_custom_loop

    result = train_with_custom_loop(config, strategy, plan, model_dir)
    loop = "custom"
{%- endif %}
    summary = {
        "replicas": strategy.num_replicas_in_sync,
        "workers": worker_count(strategy),
        "loop": loop,
        "keras_package": KERAS_PACKAGE,
        "per_replica_batch_size": config.per_replica_batch_size,
        "global_batch_size": plan.global_batch_size,
        "epochs": config.epochs,
        "steps_per_epoch": plan.steps_per_epoch,
        "losses": result.losses,
        "final_loss": result.final_loss,
        "metric_name": METRIC_NAME,
        "final_metric": result.final_metric,
        "eval_loss": result.eval_loss,
        "eval_metric": result.eval_metric,
        "weights_path": result.weights_path,
        "weights_fingerprint": result.weights_fingerprint,
    }
    log.info("final weights fingerprint: %s", result.weights_fingerprint)
    log.info(
        "done: replicas %d, global batch %d, eval loss %.4f, eval %s %.4f",
        summary["replicas"],
        summary["global_batch_size"],
        summary["eval_loss"],
        METRIC_NAME,
        summary["eval_metric"],
    )
{%- if cookiecutter.distribution == "multi_worker" %}
    if config.summary_json and is_chief(strategy):
{%- else %}
    if config.summary_json:
{%- endif %}
        write_summary(config.summary_json, summary)
    return summary


def write_summary(path, summary):
    """Write the summary JSON atomically (a reader never sees half a file)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    partial.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    partial.replace(target)
