"""Nothing lost on a crash: a run killed with SIGKILL at any moment and restarted
with the same command ends where an uninterrupted run ends, and a NaN loss stops
training without touching the last good checkpoint."""

import importlib
import random
import subprocess
import sys
import threading
{% if cookiecutter.keras_package == "keras3" %}
import keras
{%- endif %}
import numpy as np
import pytest
import tensorflow as tf
{%- if cookiecutter.keras_package == "tf_keras" %}
import tf_keras as keras
{%- endif %}
from conftest import LOOPS, assert_same_weights, read_json

from {{ cookiecutter.package_name }} import training
from {{ cookiecutter.package_name }}.training import TrainingError, train

KILLS = 2


def train_command(model_dir, loop{% if cookiecutter.data_source == "tfrecord" %}, data_dir{% endif %}):
    command = [
        sys.executable, "-m", "{{ cookiecutter.package_name }}", "train",
{%- if cookiecutter.distribution == "mirrored" %}
        "--cpu-replicas", "2",
{%- endif %}
        "--epochs", "8", "--steps-per-epoch", "12", "--seed", "7",
        "--model-dir", str(model_dir), "--summary-json", str(model_dir / "summary.json"),
{%- if cookiecutter.data_source == "tfrecord" %}
        "--data-dir", str(data_dir),
{%- endif %}
    ]
{%- if cookiecutter.training_loop == "both" %}
    return [*command, "--loop", loop]
{%- else %}
    return command
{%- endif %}


def run_to_the_end(command):
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stderr


def run_and_kill(command, epochs_done, delay):
    """Start a run and SIGKILL it `delay` seconds after it logs its `epochs_done`-th
    epoch (a moment inside training, or inside the checkpoint save that follows)."""
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    watchdog = threading.Timer(300, process.kill)  # never hang the suite
    watchdog.start()
    try:
        seen = 0
        for line in process.stderr:
            seen += line.startswith("epoch ")
            if seen == epochs_done:
                threading.Timer(delay, process.kill).start()
                break
        process.stderr.read()
        return process.wait()
    finally:
        watchdog.cancel()
        process.kill()


@pytest.mark.parametrize("loop", LOOPS)
def test_killed_runs_resume_to_the_uninterrupted_result(tmp_path, loop{% if cookiecutter.data_source == "tfrecord" %}, data_dir{% endif %}):
    reference, resumed = tmp_path / "uninterrupted", tmp_path / "killed"
    run_to_the_end(train_command(reference, loop{% if cookiecutter.data_source == "tfrecord" %}, data_dir{% endif %}))
    command = train_command(
        resumed, loop{% if cookiecutter.data_source == "tfrecord" %}, data_dir{% endif %}
    )
    moments = random.Random(f"{loop}-kills")
    codes = [
        run_and_kill(command, epochs_done=moments.randint(1, 2), delay=moments.uniform(0, 0.3))
        for _ in range(KILLS)
    ]
    assert codes == [-9] * KILLS, f"a run ended before it was killed (exit codes {codes})"
    log = run_to_the_end(command)
    assert "resumed from epoch " in log
    expected, actual = read_json(reference / "summary.json"), read_json(resumed / "summary.json")
    assert abs(actual["final_loss"] - expected["final_loss"]) <= 1e-6
    assert_same_weights(actual["weights_path"], expected["weights_path"], atol=1e-6)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_finished_run_restarted_has_nothing_left_to_train(one_device, sgd_config, loop):
    config = sgd_config("finished", 128, epochs=2{% if cookiecutter.training_loop == "both" %}, loop=loop{% endif %})
    first = train(config, one_device)
    again = train(config, one_device)
    assert again["losses"] == []
    assert again["final_loss"] == first["final_loss"]
    assert again["weights_fingerprint"] == first["weights_fingerprint"]


def poisoned(load_examples):
    """load_examples whose training features are NaN from the first example on."""

    def load(config, num_workers=1):
        train_examples, eval_examples = load_examples(config, num_workers)
        return train_examples.map(lambda x, y: (x * np.nan, y)), eval_examples

    return load


@pytest.mark.parametrize("loop", LOOPS)
def test_nan_loss_stops_training_and_keeps_the_last_good_checkpoint(
    one_device, sgd_config, monkeypatch, loop
):
    config = sgd_config("nan", 128, epochs=1{% if cookiecutter.training_loop == "both" %}, loop=loop{% endif %})
    train(config, one_device)
    backup = tf.train.latest_checkpoint(f"{config.model_dir}/backup")
    assert backup and backup.endswith("ckpt-1")
    monkeypatch.setattr(training, "load_examples", poisoned(training.load_examples))
    config.epochs = 3
    stopped = r"^the training loss became nan in epoch 2 by step \d+ "
    with pytest.raises(TrainingError, match=stopped):
        train(config, one_device)
    assert tf.train.latest_checkpoint(f"{config.model_dir}/backup") == backup


def wider_model(build_model):
    def build(*args, **kwargs):
        model = build_model(*args, **kwargs)
        inputs = model.inputs[0]
        return type(model)(inputs, model(inputs) + keras.layers.Dense(4)(inputs))

    return build


@pytest.mark.parametrize("loop", LOOPS)
def test_a_checkpoint_of_another_model_is_refused_in_one_line(
    one_device, sgd_config, monkeypatch, loop
):
    config = sgd_config("changed", 128, epochs=1{% if cookiecutter.training_loop == "both" %}, loop=loop{% endif %})
    train(config, one_device)
    module = importlib.import_module(f"{{ cookiecutter.package_name }}.train_{loop}")
    monkeypatch.setattr(module, "build_model", wider_model(module.build_model))
    config.epochs = 2
    refused = r"^the checkpoint .*ckpt-1 does not fit this model and optimizer \(.*\) - train into"
    with pytest.raises(TrainingError, match=refused):
        train(config, one_device)
