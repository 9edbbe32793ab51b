"""Bad input fails at once, before any training: one line naming the bad value
and how to fix it, a non-zero exit, and nothing written."""

import shutil
from collections import namedtuple

import pytest

from {{ cookiecutter.package_name }} import checkpointing
from {{ cookiecutter.package_name }}.checkpointing import CheckpointError, prepare_model_dir

DiskUsage = namedtuple("DiskUsage", "total used free")


def test_model_dir_that_cannot_be_created_is_refused(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(CheckpointError, match=r"^cannot write to the model directory .*a-file/run"):
        prepare_model_dir(blocker / "run")


def test_model_dir_on_a_full_disk_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "disk_usage", lambda path: DiskUsage(10 * 2**30, 10 * 2**30, 2**20))
    refused = r"^only 1 MiB free for the model directory .* 64 MiB"
    with pytest.raises(CheckpointError, match=refused):
        prepare_model_dir(tmp_path / "run")
    assert checkpointing.MIN_FREE_BYTES == 64 * 2**20


def test_writable_model_dir_is_left_clean(tmp_path):
    model_dir = prepare_model_dir(tmp_path / "run")
    assert model_dir.is_dir() and not list(model_dir.iterdir())


@pytest.mark.parametrize(
    "flags, message",
    [
        (
            ["--model-dir", "{file}/run"],
            "error: cannot write to the model directory {file}/run (Not a directory)"
            " - pass a writable --model-dir",
        ),
        (
            ["--per-replica-batch-size", "65536"],
            "error: the training dataset has {examples} examples, fewer than one global batch of"
            " {batch} - use more data or a smaller --per-replica-batch-size",
        ),
    ],
    ids=["model-dir-not-writable", "batch-larger-than-data"],
)
def test_train_refuses_bad_input_in_one_line(cli, tmp_path, flags, message{% if cookiecutter.data_source == "tfrecord" %}, data_dir{% endif %}):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    model_dir = tmp_path / "untouched"
    values = dict(file=blocker, examples={% if cookiecutter.data_source == "tfrecord" %}1024{% else %}4096{% endif %}, batch=65536 * {% if cookiecutter.distribution == "mirrored" %}2{% else %}1{% endif %})
    flags = [flag.format(**values) for flag in flags]
    if "--model-dir" not in flags:
        flags += ["--model-dir", str(model_dir)]
    result = cli(
        "train",
{%- if cookiecutter.distribution == "mirrored" %}
        "--cpu-replicas",
        "2",
{%- endif %}
{%- if cookiecutter.data_source == "tfrecord" %}
        "--data-dir",
        str(data_dir),
{%- endif %}
        *flags,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == message.format(**values)
    assert not model_dir.exists()
