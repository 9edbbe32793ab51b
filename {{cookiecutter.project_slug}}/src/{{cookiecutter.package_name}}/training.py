"""Run one training job: plan the data for the strategy, train, evaluate, summarize."""

import dataclasses
import hashlib
import json
import logging
import math
{%- if cookiecutter.distribution == "multi_worker" %}
import shutil
{%- endif %}
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
    losses: list
    final_metric: float
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
    model_dir = Path(path).resolve()
    try:
        model_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise TrainingError(
            f"cannot create the model directory {model_dir} ({err.strerror})"
            " - pass a writable --model-dir"
        ) from None
    return model_dir
{%- if cookiecutter.distribution == "multi_worker" %}


def worker_dir(model_dir, strategy):
    """Where this worker writes: the model directory on the chief, a scratch
    directory of its own elsewhere (every worker must take part in saving; only
    the chief's copy is kept). A restarted worker starts its scratch afresh."""
    if is_chief(strategy):
        return model_dir
    scratch = model_dir / f".worker-{strategy.cluster_resolver.task_id}"
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


def check_finite(loss, epoch, step):
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
        "final_loss": result.losses[-1] if result.losses else None,
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
