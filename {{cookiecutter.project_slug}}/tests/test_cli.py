"""The command line, end to end, in fresh processes."""

import importlib.util
{%- if cookiecutter.distribution == "multi_worker" %}
import logging
{%- endif %}
import math
import os
import re
import shutil
import subprocess
import sys
{%- if cookiecutter.distribution == "multi_worker" %}
import tempfile
import types
{%- endif %}
from pathlib import Path

import pytest
{%- if cookiecutter.distribution == "multi_worker" %}
import tensorflow as tf
{%- endif %}
from conftest import load_weights, read_json, sample_statistics, scalars
{% if cookiecutter.distribution == "multi_worker" %}
from {{ cookiecutter.package_name }}.cli import log_to_worker_file
{%- endif %}
from {{ cookiecutter.package_name }}.config import TrainConfig
from {{ cookiecutter.package_name }}.distribute.startup import native_startup_noise_hidden
from {{ cookiecutter.package_name }}.task import METRIC_NAME, build_model
from {{ cookiecutter.package_name }}.training.optimizer import learning_rate_schedule

# A line of TensorFlow's C++ logging (glog format), or absl's notice before it.
NATIVE_LOG_LINE = re.compile(r"^([IWEF]\d{4} |WARNING: All log messages before absl)", re.M)


def test_train_end_to_end(cli, tmp_path{% if cookiecutter.data_source == "tfrecord" %}, data_dir{% endif %}):
    summary_path = tmp_path / "summary.json"
    result = cli(
        "train",
        "--epochs",
        "2",
{%- if cookiecutter.distribution == "mirrored" %}
        "--cpu-replicas",
        "2",
{%- endif %}
        "--model-dir",
        str(tmp_path / "run"),
{%- if cookiecutter.data_source == "tfrecord" %}
        "--data-dir",
        str(data_dir),
{%- endif %}
        "--summary-json",
        str(summary_path),
    )
    assert result.returncode == 0, result.stderr
    summary = read_json(summary_path)
{%- if cookiecutter.distribution == "mirrored" %}
    assert summary["replicas"] == 2
{%- else %}
    assert summary["replicas"] == 1  # no TF_CONFIG: a single worker
{%- endif %}
    assert summary["workers"] == 1
    assert summary["global_batch_size"] == summary["replicas"] * summary["per_replica_batch_size"]
    assert len(summary["losses"]) == summary["epochs"] == 2
    assert summary["final_loss"] == summary["losses"][-1] < summary["losses"][0]
    # Whatever the task's metric is, training reports it (its value is the task's).
    assert math.isfinite(summary["final_metric"])
    fresh = build_model(sample_statistics())
    assert len(load_weights(summary["weights_path"])) == len(fresh.get_weights())
    assert f"replicas: {summary['replicas']}" in result.stderr
{%- if cookiecutter.distribution == "mirrored" %}
    assert "all-reduce: collective, RING" in result.stderr  # on CPUs; NCCL between GPUs
{%- else %}
    assert "all-reduce: RING, gradients packed into 32 MiB messages" in result.stderr
{%- endif %}
    assert summary["resumed_from"] is None and "starting fresh" in result.stderr
    assert summary["global_step"] == 2 * summary["steps_per_epoch"]
    assert summary["examples_per_second"] > 0
    # Per-interval TensorBoard scalars (here the intervals are the epochs), and
    # the evaluation's at each epoch end.
    written = scalars(tmp_path / "run" / "logs")
    evaluated = {"eval_loss", f"eval_{METRIC_NAME}"}
    recorded = {"loss", "learning_rate", "examples_per_second", "replica_spread"}
    assert set(written) == {*recorded, *evaluated}
    epoch_ends = [summary["steps_per_epoch"], summary["global_step"]]
    assert all([step for step, _ in values] == epoch_ends for values in written.values())
    final = {name: values[-1][1] for name, values in written.items()}
    assert final["eval_loss"] == pytest.approx(summary["eval_loss"], rel=1e-6)
    assert final[f"eval_{METRIC_NAME}"] == pytest.approx(summary["eval_metric"], rel=1e-6)
    assert [loss for _, loss in written["loss"]] == pytest.approx(summary["losses"], rel=1e-5)
    # The replicas' copies stayed one model (deterministic kernels: see conftest).
    assert [spread for _, spread in written["replica_spread"]] == [0.0, 0.0]
    assert (summary["replica_spread"], summary["replica_repairs"]) == (0.0, 0)
    # The default recipe: the rate scaled to the global batch (Adam's rule: the
    # square root), warmed up, and decayed by a cosine to 0 at the run's end.
    schedule = learning_rate_schedule(
        TrainConfig(), summary["global_batch_size"], summary["global_step"]
    )
    rates = [rate for _, rate in written["learning_rate"]]
    assert rates == pytest.approx([float(schedule(step - 1)) for step in epoch_ends])
    assert rates[0] > rates[1] > 0
    assert summary["learning_rate_scaling"] == "sqrt"
    assert summary["peak_learning_rate"] == pytest.approx(
        TrainConfig().learning_rate * (summary["global_batch_size"] / 256) ** 0.5
    )
    assert all(speed > 0 for _, speed in written["examples_per_second"])
    # A default run starts quietly: no line of TensorFlow's C++ logging before
    # training starts.
    startup = result.stderr.partition("starting fresh")[0]
{%- if cookiecutter.mixed_precision == "float16" %}
    # But a CPU without AVX512-FP16 says once that float16 falls back to Eigen
    # (a fact of that CPU, not start-up noise; never on a GPU).
    startup = re.sub(r"^.*oneDNN supports DT_HALF only on platforms.*\n", "", startup, flags=re.M)
{%- endif %}
    assert not NATIVE_LOG_LINE.search(startup), startup[:2000]


# `train` whose training raises the TensorFlow error named by argv[1].
FAILING_TRAIN = """
import sys

import tensorflow as tf

from {{ cookiecutter.package_name }} import cli
from {{ cookiecutter.package_name }}.training import assembly


def failing(config, strategy):
    raise getattr(tf.errors, sys.argv[1])(None, None, "NCCL failure: unhandled system error")


assembly.train = failing
sys.exit(cli.main(sys.argv[2:]))
"""


@pytest.mark.parametrize(
    "error, status", [("InternalError", 142), ("DataLossError", 142), ("InvalidArgumentError", 1)]
)
def test_failed_infrastructure_exits_142_in_one_line_a_bug_1(tmp_path, error, status{% if cookiecutter.data_source == "tfrecord" %}, data_dir{% endif %}):
    # Exit 1 or 2 ends a run for good (the restart table): an NCCL or cuDNN
    # failure, a read that failed its checksum this time, is retried.
    command = [sys.executable, "-c", FAILING_TRAIN, error, "train", "--model-dir", str(tmp_path)]
{%- if cookiecutter.data_source == "tfrecord" %}
    command += ["--data-dir", str(data_dir)]
{%- endif %}
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == status, result.stderr[-3000:]
    assert "Traceback" in result.stderr  # where it was raised (TensorFlow reports some bugs so)
    if status == 142:
        assert result.stderr.splitlines()[-1] == (
            f"error: {error}: NCCL failure: unhandled system error - the storage, the network"
            " or a device failed; exiting 142: the restart resumes from the last checkpoint"
        )


# Every command that runs the task, with the flags it requires.
COMMANDS = [
    ["train"],
    ["doctor"],
    ["export", "--model-dir", "run"],
    ["gpu-smoke"],
{%- if cookiecutter.data_source == "tfrecord" %}
    ["make-data", "--output-dir", "data"],
    ["index", "--data-dir", "data"],
{%- if cookiecutter.task == "image" %}
    ["import-images", "--source", "photos", "--output-dir", "data"],
{%- else %}
    ["import-csv", "--train", "a.csv", "--eval", "b.csv", "--output-dir", "data"],
{%- endif %}
{%- endif %}
]


def edited_package(tmp_path, *replacements):
    """PYTHONPATH for a copy of the package whose task.py has each (old, new) replaced."""
    package = Path(importlib.util.find_spec("{{ cookiecutter.package_name }}").origin).parent
    copy = tmp_path / "src" / package.name
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
    source = (copy / "task.py").read_text()
    for old, new in replacements:
        assert old in source, old
        source = source.replace(old, new)
    (copy / "task.py").write_text(source)
    return {"PYTHONPATH": str(tmp_path / "src")}


def test_a_task_lacking_a_piece_is_refused_in_one_line_by_every_command(cli, tmp_path):
    renamed = ("def build_model(", "def build_network("), ("def prepare_batch(", "def prepare(")
    environment = edited_package(tmp_path, *renamed)
    for command in COMMANDS:
        result = cli(*command, cwd=tmp_path, env=environment)
        assert (result.returncode, result.stderr) == (
            2,
            "error: task.py defines no build_model, prepare_batch - docs/your-model.md says"
            " what each is, and examples/ holds complete tasks to copy\n",
        ), command
    # Read from the source before TensorFlow starts: nothing was run or written.
    assert sorted(path.name for path in tmp_path.iterdir()) == ["src"]


def test_a_task_written_before_its_record_was_declared_is_told_in_one_line(cli, tmp_path):
    # A task whose record pieces came from its own functions, with no FEATURES.
    environment = edited_package(tmp_path, ("\nFEATURES = ", "\nRECORD = "))
    result = cli("export", "--model-dir", str(tmp_path / "run"), env=environment)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr[-3000:]
    assert result.stderr.startswith("error: task.py has no FEATURES declaration to derive ")
    assert "declare its record once in FEATURES (toolkit/features.py)" in result.stderr


def test_a_task_written_before_the_layers_is_told_where_its_imports_went(cli, tmp_path):
    old = "from {{ cookiecutter.package_name }}.compat import keras"
    moved = ("from {{ cookiecutter.package_name }}.distribute.compat import keras", old)
    result = cli("train", env=edited_package(tmp_path, moved))
    assert (result.returncode, result.stderr) == (
        2,
        "error: task.py imports {{ cookiecutter.package_name }}.compat, which is"
        " {{ cookiecutter.package_name }}.distribute.compat since the package moved into its"
        " layers (ARCHITECTURE.md) - change the import\n",
    )
    toolkit = ("from {{ cookiecutter.package_name }}.toolkit import", "from {{ cookiecutter.package_name }} import")
    result = cli("doctor", env=edited_package(tmp_path / "flat", toolkit))
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.startswith(
        "error: task.py imports {{ cookiecutter.package_name }}.features, which is"
        " {{ cookiecutter.package_name }}.toolkit.features since"
    )


def test_a_tasks_imports_are_checked_from_the_files_without_starting_tensorflow(tmp_path):
    imports = [
        "from {{ cookiecutter.package_name }}.distribute.compat.keras import layers",
        "import {{ cookiecutter.package_name }}.toolkit.featurez",
        "from .toolkit import featurez",
    ]
    for line in imports:
        (tmp_path / "task.py").write_text(line + "\n")
        checked = subprocess.run(
            [sys.executable, "-c", CHECK_TASK, str(tmp_path / "task.py")],
            capture_output=True,
            text=True,
        )
        assert checked.stdout.startswith("task.py imports {{ cookiecutter.package_name }}."), line
        assert checked.stdout.endswith(" tensorflow: False\n"), (line, checked.stdout)


CHECK_TASK = """
import sys
from {{ cookiecutter.package_name }}.checks.task_contract import check_task
try:
    check_task(sys.argv[1])
except Exception as refused:
    print(refused, "tensorflow:", "tensorflow" in sys.modules)
"""


def test_native_startup_noise_is_hidden_and_other_lines_pass(capfd):
    with native_startup_noise_hidden():
        os.write(2, b"I0000 00:00:1.5 7 port.cc:153] oneDNN custom operations are on.\n")
        os.write(2, b"E0000 00:00:1.6 7 cuda_platform.cc:52] failed call to cuInit: ...\n")
        os.write(2, b"a warning that matters\n")
    assert capfd.readouterr().err == "a warning that matters\n"


def test_deterministic_reruns_give_bit_identical_weights(cli, tmp_path{% if cookiecutter.data_source == "tfrecord" %}, data_dir{% endif %}):
    # Deterministic kernels are not the default ones (the weights differ from a
    # default run's in the last bits), but two runs with the flag agree exactly.
    # Seed 0 on purpose: a global TensorFlow seed of 0 once crashed every run.
    # The flag alone turns them on (not the tests' TF_DETERMINISTIC_OPS).
    fingerprints = []
    for run in ("first", "second"):
        # fmt: off
        result = cli(
            "train", "--deterministic", "--seed", "0", "--epochs", "1", "--steps-per-epoch", "4",
{%- if cookiecutter.data_source == "tfrecord" %}
            "--data-dir", str(data_dir),
{%- endif %}
            "--model-dir", str(tmp_path / run), "--summary-json", str(tmp_path / f"{run}.json"),
            env={"TF_DETERMINISTIC_OPS": "0"},
        )
        # fmt: on
        assert result.returncode == 0, result.stderr
        assert "deterministic ops: on" in result.stderr
        fingerprints.append(read_json(tmp_path / f"{run}.json")["weights_fingerprint"])
    assert fingerprints[0] == fingerprints[1]
{%- if cookiecutter.distribution == "multi_worker" %}


def test_a_worker_with_a_url_model_dir_logs_to_a_local_file(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    root = logging.getLogger()
    levels = {handler: handler.level for handler in root.handlers}
    try:
        log_to_worker_file("ram://bucket/run", types.SimpleNamespace(task_type="worker", task_id=1))
        logging.getLogger("{{ cookiecutter.package_name }}").warning("a line")
    finally:
        for handler in set(root.handlers) - set(levels):
            root.removeHandler(handler)
            handler.close()
        for handler, level in levels.items():
            handler.setLevel(level)
    assert (tmp_path / "worker-1.log").read_text() == "a line\n"
    assert not tf.io.gfile.exists("ram://bucket/run")
{%- endif %}
