"""Command line: `{{ cookiecutter.project_slug }} COMMAND ...`.

Commands: train, doctor, export, gpu-smoke{% if cookiecutter.data_source == "tfrecord" %}, make-data, index, {% if cookiecutter.task == "image" %}import-images{% else %}import-csv{% endif %}{% endif %}{% if cookiecutter.distribution == "multi_worker" %}, launch{% endif %}.
"""

import argparse
import dataclasses
import logging
import sys
{%- if cookiecutter.distribution == "multi_worker" %}
import tempfile
import time
import traceback
from pathlib import Path
{%- else %}
import traceback
{%- endif %}

from {{ cookiecutter.package_name }} import (
    STALLED_EXIT_STATUS,
    TrainerError,
    TransientError,
    first_line,
{%- if cookiecutter.distribution == "multi_worker" %}
    is_remote,
{%- endif %}
    is_transient,
    last_words,
)
from {{ cookiecutter.package_name }}.arguments import (
    ArgumentParser,
    add_subcommand,
    fraction,
{%- if cookiecutter.tracking == "mlflow" %}
    model_name,
{%- endif %}
    positive_float,
    positive_int,
)
from {{ cookiecutter.package_name }}.checks.task_contract import check_task
from {{ cookiecutter.package_name }}.config import (
    FRACTION_FIELDS,
    POSITIVE_FIELDS,
    TrainConfig,
    load_config,
    value_type,
)
{%- if cookiecutter.data_source == "tfrecord" %}
from {{ cookiecutter.package_name }}.data import commands as data_commands
{%- endif %}
from {{ cookiecutter.package_name }}.distribute import {% if cookiecutter.distribution == "multi_worker" %}launch, {% endif %}preemption
from {{ cookiecutter.package_name }}.distribute.startup import start_tensorflow
from {{ cookiecutter.package_name }}.progress import ProgressAwareHandler

PROG = "{{ cookiecutter.project_slug }}"


def add_config_flags(parser, command):
    """The training settings (config.TrainConfig) as flags. Every command that
    takes them takes all of them, so a train command line runs as a doctor one;
    those `command` does not use say so in their help."""
    parser.add_argument("--config", help="TOML file; keys are these flags with underscores")
    for field in dataclasses.fields(TrainConfig):
        options = flag_options(field)
        users = field.metadata["commands"]
        if command not in users:
            options["help"] += f" ({', '.join(users)} only: {command} ignores it)"
        parser.add_argument("--" + field.name.replace("_", "-"), **options)
{%- if cookiecutter.distribution == "multi_worker" %}
    # Not a setting here: given, it is refused in one line (run_train).
    parser.add_argument("--cpu-replicas", type=positive_int, help=argparse.SUPPRESS)
{%- endif %}


def flag_options(field):
    """argparse options for a setting: its type's parser, its values, its help.
    Every flag defaults to None ("not given"), so the help names the default."""
    # argparse formats help with %: a literal one ("5% of the run") must be doubled.
    kind, default = value_type(field), field.default
    text = field.metadata["help"].replace("%", "%%")
    if kind is bool:
        return {
            "action": argparse.BooleanOptionalAction,
            "help": f"{text} (default: {'on' if default else 'off'})",
        }
    if default is not None:
        text += f" (default: {default})"
    if field.metadata["choices"]:
        return {"choices": field.metadata["choices"], "help": text}
    if field.name in POSITIVE_FIELDS:
        return {"type": positive_int, "help": text}
    if field.name in FRACTION_FIELDS:
        return {"type": fraction, "help": text}
    return {"type": positive_float if kind is float else kind, "help": text}


def build_parser():
    parser = ArgumentParser(prog=PROG, description="Data-parallel training with tf.distribute.")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--verbose", action="store_true", help="show TensorFlow's own start-up and info logs"
    )
    # Every command but `launch` (its workers load TensorFlow, it never does).
    parser.set_defaults(needs_tensorflow=True)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=ArgumentParser)

    # The commands that take the training settings.
    for name, handler, text in (
        ("train", run_train, "train the model"),
        (
            "doctor",
            run_doctor,
            "check on a few batches that training really is distributed (takes train's flags)",
        ),
    ):
        add_config_flags(add_subcommand(commands, common, name, handler, text), name)

    export = add_subcommand(
        commands, common, "export", run_export, "write the model as a SavedModel for serving"
    )
    export.add_argument("--model-dir", required=True, help="the --model-dir of a finished run")
    export.add_argument(
        "--export-dir", help="versions go to EXPORT_DIR/1, /2, ... (default: MODEL_DIR/export)"
    )
{%- if cookiecutter.tracking == "mlflow" %}
    export.add_argument(
        "--register-model",
        metavar="NAME",
        type=model_name,
        help="also register the export as a new version of this MLflow model, logged"
        " to the training run's MLflow run",
    )
{%- endif %}

    smoke = add_subcommand(
        commands, common, "gpu-smoke", run_gpu_smoke, "check this machine's GPUs with one step"
    )
    smoke.add_argument(
        "--cpu-replicas",
        type=positive_int,
        help="CPU-only machines: run every check but GPU placement on N logical CPUs",
    )
{%- if cookiecutter.distribution == "multi_worker" %}
    launch.add_command(commands, common)
{%- endif %}
{%- if cookiecutter.data_source == "tfrecord" %}
    data_commands.add_commands(commands, common)
{%- endif %}
    return parser


def config_overrides(args):
    """The settings given as flags (None: not given)."""
    return {
        key: value
        for key, value in vars(args).items()
        if key not in ("command", "handler", "config", "verbose", "needs_tensorflow")
    }


def train_to_exit_status(config, strategy):
    """Train; 0 when the run is done, PREEMPTED_EXIT_STATUS when it saved and
    stopped for a SIGTERM (the watchdog exits STALLED_EXIT_STATUS from its own
    thread on a stall)."""
    from {{ cookiecutter.package_name }}.training.assembly import train
    from {{ cookiecutter.package_name }}.training.controller import Preempted

    try:
        train(config, strategy)
    except Preempted:
        return preemption.PREEMPTED_EXIT_STATUS
    return 0


def run_doctor(args):
    config = config_from_args(args)
    from {{ cookiecutter.package_name }}.checks.doctor import doctor

    report = doctor(config)
    report.print()
    return 0 if report.passed else 1


def run_export(args):
    from {{ cookiecutter.package_name }}.export import export

    path = export(args.model_dir, args.export_dir{% if cookiecutter.tracking == "mlflow" %}, args.register_model{% endif %})
    if path:
        print(path)
    return 0


def run_gpu_smoke(args):
    from {{ cookiecutter.package_name }}.checks.gpu_smoke import gpu_smoke

    report = gpu_smoke(load_config(None, {}), args.cpu_replicas)
    report.print()
    return 0 if report.passed else 1


def main(argv=None):
    args = build_parser().parse_args(argv)
    # The check commands print only their PASS/FAIL lines (and warnings).
    quiet = args.command in ("doctor", "gpu-smoke")
    logging.basicConfig(
        level=logging.WARNING if quiet else logging.INFO,
        format="%(message)s",
        handlers=[ProgressAwareHandler()],
    )
    logging.captureWarnings(True)  # a Python warning prints above a progress bar too
    try:
        if args.needs_tensorflow:
            # Before TensorFlow loads: a preemption notice during start-up counts too.
            check_task()
            preemption.catch_from_start()
            start_tensorflow(args.verbose)
        status = args.handler(args)
        if status == preemption.PREEMPTED_EXIT_STATUS:
            last_words(status, "preempted: saved after SIGTERM")
        else:
            last_words(status, "finished" if status == 0 else "a check failed")
        return status
    except (TrainerError, TransientError) as err:
        message, status = str(err), err.exit_status
    except KeyboardInterrupt:
        last_words(130, "interrupted (Ctrl-C)")
        raise
    except Exception as err:
        # Retried only in training, where a restart resumes; the traceback stays:
        # TensorFlow reports some bugs so too (a task's py_function: UnknownError).
        if args.command != "train" or not is_transient(err):
            last_words(1, f"{type(err).__name__}: {first_line(err)}")
            raise
        traceback.print_exc()
        message, status = transient_message(err), STALLED_EXIT_STATUS
    print(f"error: {message}", file=sys.stderr)
    last_words(status, message)
    return status


def transient_message(err):
    """One line for infrastructure that failed this time."""
    if isinstance(err, TransientError):
        return str(err)
    return (
        f"{type(err).__name__}: {first_line(err)} - the storage, the network or a device"
        f" failed; exiting {STALLED_EXIT_STATUS}: the restart resumes from the last checkpoint"
    )
{% include "cli/" ~ cookiecutter.distribution ~ ".py" %}