"""Export for serving: the trained model as a TensorFlow SavedModel in the
versioned layout TensorFlow Serving loads (`<export-dir>/<version>/`).

The `serving_default` signature takes what a client sends (the model's inputs
as the task declares them, record_format.SERVING_INPUT, turned into model
inputs inside the graph by record_format.serving_inputs) and returns
what task.serving_outputs makes of the model's float32 outputs (for a
classifier, `logits` and class `probabilities`). Loading it needs TensorFlow only:
no Keras, no code of this project.
"""

import logging
import os

import tensorflow as tf

from {{ cookiecutter.package_name }} import TrainerError, first_line, is_remote
from {{ cookiecutter.package_name }}.data import statistics
from {{ cookiecutter.package_name }}.data.record_format import SERVING_INPUT, serving_inputs
{%- if cookiecutter.distribution == "multi_worker" %}
from {{ cookiecutter.package_name }}.distribute.cluster import is_chief_task, read_tf_config
{%- endif %}
from {{ cookiecutter.package_name }}.distribute.compat import save_for_serving
{%- if cookiecutter.mixed_precision != "no" %}
from {{ cookiecutter.package_name }}.distribute.precision import set_precision_policy
{%- endif %}
from {{ cookiecutter.package_name }}.task import build_model, serving_outputs
from {{ cookiecutter.package_name }}.training.checkpointing import FINAL_WEIGHTS

log = logging.getLogger(__name__)

SIGNATURE = "serving_default"


class ExportError(TrainerError):
    pass


def trained_model(model_dir):
    """The model with the final weights of the finished run in `model_dir`, in float32."""
    weights = os.path.join(model_dir, FINAL_WEIGHTS)
    if not tf.io.gfile.isdir(model_dir):
        raise ExportError(
            f"--model-dir {model_dir} does not exist - pass the --model-dir of a `train` run"
        )
    if not tf.io.gfile.exists(weights):
        raise ExportError(
            f"{model_dir} has no {FINAL_WEIGHTS}: its run has not finished - run the same"
            " `train` command again to finish it (it resumes), then export"
        )
{%- if cookiecutter.mixed_precision != "no" %}
    # Weights are float32 under mixed_{{ cookiecutter.mixed_precision }} too; serving computes in float32.
    set_precision_policy(False)
{%- endif %}
    model = build_model(statistics.load(model_dir))
    try:
        model.load_weights(weights)
    except (ValueError, OSError) as err:
        raise ExportError(
            f"{weights} does not fit this model ({first_line(err)}) - export with the"
            " code that trained it"
        ) from None
    return model


def serving_function(model):
    """What a client sends (SERVING_INPUT) -> task.serving_outputs (float32)."""

    @tf.function(input_signature=[SERVING_INPUT])
    def serve(received):
        return serving_outputs(model(serving_inputs(received), training=False))

    return serve


def next_version(export_dir):
    """1 + the highest version under `export_dir` (TensorFlow Serving loads the highest)."""
    if not tf.io.gfile.isdir(export_dir):
        return 1
    versions = [
        int(name.rstrip("/"))
        for name in tf.io.gfile.listdir(export_dir)
        if name.rstrip("/").isdigit()
    ]
    return max(versions, default=0) + 1


def publish(partial, path):
    """Rename the SavedModel written at `partial` to `path`."""
    if not is_remote(path):
        tf.io.gfile.rename(partial, path)  # one atomic rename
        return
    # A bucket (gs://) has no directory to rename, only files, and TensorFlow's
    # ram:// renames the directory's own entry alone: move file by file, the
    # saved_model.pb Serving loads last, so a version that has it is complete (a
    # load tried earlier fails, and Serving's retries, a minute apart, find it).
    files = [
        os.path.join(folder, name)
        for folder, _, names in tf.io.gfile.walk(partial)
        for name in names
    ]
    for source in sorted(files, key=lambda file: os.path.basename(file) == "saved_model.pb"):
        target = path + source[len(partial) :]
        tf.io.gfile.makedirs(os.path.dirname(target))
        tf.io.gfile.rename(source, target)
    tf.io.gfile.rmtree(partial)


def export(model_dir, export_dir=None{% if cookiecutter.tracking == "mlflow" %}, register_model=None{% endif %}):
    """Write the SavedModel of the run in `model_dir` as the next version under
    `export_dir` (default: `<model-dir>/export`)
{%- if cookiecutter.tracking == "mlflow" %}, and with `register_model`
    register it as a version of that MLflow model, logged to the run's MLflow
    run
{%- endif %}; return its path
{%- if cookiecutter.distribution == "multi_worker" %}, or None on a
    worker that is not the chief (the chief exports)
{%- endif %}."""
{%- if cookiecutter.distribution == "multi_worker" %}
    if not is_chief_task(read_tf_config()):
        log.info("not the chief: the chief exports")
        return None
{%- endif %}
    export_dir = export_dir or os.path.join(model_dir, "export")
    model = trained_model(model_dir)
{%- if cookiecutter.tracking == "mlflow" %}
    tracked = None
    if register_model:
        # Here, not above: importing MLflow takes seconds, which an export that
        # registers nothing should not pay.
        from {{ cookiecutter.package_name }}.tracking.mlflow_run import register_export, tracked_run

        # Looked up first: a registration that cannot be made leaves no export.
        tracked = tracked_run(model_dir, export_dir)
{%- endif %}
    version = next_version(export_dir)
    path = os.path.join(export_dir, str(version))
    # Written under a name Serving ignores, then renamed: Serving never loads a
    # version half-written.
    partial = os.path.join(export_dir, f".partial-{version}")
    try:
        if tf.io.gfile.exists(partial):
            tf.io.gfile.rmtree(partial)
        tf.io.gfile.makedirs(export_dir)
        save_for_serving(model, serving_function(model), partial)
        publish(partial, path)
    except tf.errors.OpError as err:
        raise ExportError(
            f"cannot write {path}: {first_line(err.message)} - pass a writable --export-dir"
        ) from None
    log.info("exported version %d to %s (signature %s)", version, path, SIGNATURE)
{%- if cookiecutter.tracking == "mlflow" %}
    if tracked:
        registered = register_export(*tracked, path, register_model)
        log.info(
            "registered as version %d of MLflow model %r (run %s)",
            registered,
            register_model,
            tracked[1].info.run_id,
        )
{%- endif %}
    return path
