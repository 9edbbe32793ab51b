"""The command line, end to end, in fresh processes."""

from pathlib import Path

import tensorflow as tf
from conftest import load_weights, read_json

from {{ cookiecutter.package_name }}.model import build_model


def scalar_steps(log_dir):
    """{tag: [global steps]} of the TensorBoard scalars written under `log_dir`."""
    steps = {}
    for path in sorted(Path(log_dir).glob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                steps.setdefault(value.tag, []).append(event.step)
    return steps


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
    assert summary["final_metric"] > 0.4  # well above chance (0.25)
    assert len(load_weights(summary["weights_path"])) == len(build_model().get_weights())
    assert f"replicas: {summary['replicas']}" in result.stderr
    assert summary["resumed_from"] is None and "starting fresh" in result.stderr
    assert summary["global_step"] == 2 * summary["steps_per_epoch"]
    assert summary["examples_per_second"] > 0
    # Per-interval TensorBoard scalars: here the intervals end at the epoch ends.
    epoch_ends = [summary["steps_per_epoch"], summary["global_step"]]
    assert scalar_steps(tmp_path / "run" / "logs") == {
        "loss": epoch_ends, "learning_rate": epoch_ends, "examples_per_second": epoch_ends
    }


def test_deterministic_reruns_give_bit_identical_weights(cli, tmp_path{% if cookiecutter.data_source == "tfrecord" %}, data_dir{% endif %}):
    # Deterministic kernels are not the default ones (the weights differ from a
    # default run's in the last bits), but two runs with the flag agree exactly.
    fingerprints = []
    for run in ("first", "second"):
        result = cli(
            "train", "--deterministic", "--epochs", "1", "--steps-per-epoch", "4",
{%- if cookiecutter.data_source == "tfrecord" %}
            "--data-dir", str(data_dir),
{%- endif %}
            "--model-dir", str(tmp_path / run), "--summary-json", str(tmp_path / f"{run}.json"),
        )
        assert result.returncode == 0, result.stderr
        assert "deterministic ops: on" in result.stderr
        fingerprints.append(read_json(tmp_path / f"{run}.json")["weights_fingerprint"])
    assert fingerprints[0] == fingerprints[1]
