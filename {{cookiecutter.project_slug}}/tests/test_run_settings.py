"""A rerun into a model directory resumes its run: settings that define the run
changed on the way are refused in one line (unless --resume-with-changes), and
every other change, more epochs included, is said in a line of its own."""

import json
import logging

import pytest
import tensorflow as tf

from {{ cookiecutter.package_name }}.training import run_settings
from {{ cookiecutter.package_name }}.training.assembly import train
from {{ cookiecutter.package_name }}.training.checkpointing import CheckpointError


def changed_lines(caplog):
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == run_settings.__name__ and record.levelno == logging.WARNING
    ]


@pytest.fixture
def finished_run(one_device, sgd_config):
    """A 1-epoch run (6 steps), finished: its config, to rerun with changes."""
    config = sgd_config("run", 128, epochs=1, steps_per_epoch=6, learning_rate=0.05)
    train(config, one_device)
    return config


def test_another_learning_rate_or_momentum_is_refused_naming_each_change(finished_run, one_device):
    latest = tf.train.latest_checkpoint(f"{finished_run.model_dir}/checkpoints")
    finished_run.epochs, finished_run.learning_rate = 2, 0.1
    finished_run.momentum = 0.9
    refused = (
        r"^the run in \S+ was started with other settings \(--learning-rate 0.05 -> 0.1,"
        r" --momentum 0.0 -> 0.9\): resumed, it would be another run - resume with the"
        r" settings it was started with \(its settings.json\), pass --resume-with-changes"
    )
    with pytest.raises(CheckpointError, match=refused):
        train(finished_run, one_device)
    # Nothing trained, nothing kept: the next try compares with the same settings.
    assert tf.train.latest_checkpoint(f"{finished_run.model_dir}/checkpoints") == latest
    with open(f"{finished_run.model_dir}/settings.json") as handle:
        assert json.load(handle)["settings"]["learning_rate"] == 0.05


def test_resume_with_changes_goes_on_saying_each_change(finished_run, one_device, caplog):
    finished_run.epochs, finished_run.learning_rate = 2, 0.1
    finished_run.resume_with_changes = True
    caplog.set_level(logging.INFO)
    resumed = train(finished_run, one_device)
    assert resumed["resumed_from"] == {"epoch": 1, "step": 0}
    assert changed_lines(caplog) == [
        "changed since the run started: --epochs 1 -> 2: the run now ends at optimizer"
        " step 12, not 6, and its warmup and learning-rate schedule follow the new length",
        "changed since the run started: --learning-rate 0.05 -> 0.1 (--resume-with-changes)",
    ]
    # The next resumption is compared with the settings it went on with.
    caplog.clear()
    finished_run.resume_with_changes, finished_run.epochs = False, 3
    train(finished_run, one_device)
    assert [line.split(":")[1] for line in changed_lines(caplog)] == [" --epochs 2 -> 3"]


def test_the_same_settings_resume_without_a_word(finished_run, one_device, caplog):
    caplog.set_level(logging.INFO)
    again = train(finished_run, one_device)
    assert again["resumed_from"] == {"epoch": 1, "step": 0}
    assert changed_lines(caplog) == []
