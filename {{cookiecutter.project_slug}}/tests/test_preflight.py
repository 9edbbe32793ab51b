"""Bad input fails at once, before any training: one line naming the bad value
and how to fix it, a non-zero exit, and nothing written."""

{% if cookiecutter.task == "image" and cookiecutter.data_source == "tfrecord" -%}
import json
{% endif -%}
import shutil
from collections import namedtuple
from pathlib import Path

import pytest
import tensorflow as tf
{%- if cookiecutter.task == "image" and cookiecutter.data_source == "tfrecord" %}
from conftest import read_json, truncated_jpeg_record, write_shards
{%- endif %}

from {{ cookiecutter.package_name }} import {% if cookiecutter.mixed_precision == "bfloat16" %}TrainerError, {% endif %}is_remote
{%- if cookiecutter.task == "image" and cookiecutter.data_source == "tfrecord" %}
from {{ cookiecutter.package_name }}.data.manifest import INDEX_COMMAND
{%- endif %}
{%- if cookiecutter.mixed_precision == "bfloat16" %}
from {{ cookiecutter.package_name }}.distribute.precision import check_bfloat16_gpus
{%- endif %}
from {{ cookiecutter.package_name }}.training import checkpointing
from {{ cookiecutter.package_name }}.training.checkpointing import CheckpointError, prepare_model_dir

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
    model_dir = Path(prepare_model_dir(tmp_path / "run"))
    assert model_dir.is_dir() and not list(model_dir.iterdir())


@pytest.mark.parametrize(
    "path, remote",
    [
        ("gs://bucket/run", True),
        ("s3://bucket/run", True),
        ("ram://run", True),
        ("runs/latest", False),
        ("/data/runs/gs://odd-name", False),
        ("./gs:/bucket/run", False),
        (Path("runs/latest"), False),
    ],
)
def test_a_url_is_remote_and_a_local_path_is_not(path, remote):
    assert is_remote(path) is remote


def test_a_url_model_dir_is_prepared_through_tensorflow_and_a_local_one_resolved(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    url = f"ram://{tmp_path.name}/run"
    assert prepare_model_dir(url + "/") == url
    assert tf.io.gfile.isdir(url) and not tf.io.gfile.listdir(url)
    assert prepare_model_dir("run") == str((tmp_path / "run").resolve())
    assert sorted(path.name for path in tmp_path.iterdir()) == ["run"]  # no ./ram:
    refused = r"^cannot write to the model directory nosuch://bucket/run \(.*nosuch.*\) - pass"
    with pytest.raises(CheckpointError, match=refused):
        prepare_model_dir("nosuch://bucket/run")


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
            "error: the training data has {examples} examples, fewer than one global batch of"
            " {batch} - use more data, or a smaller --per-replica-batch-size or"
            " --accumulate-steps",
        ),
    ],
    ids=["model-dir-not-writable", "batch-larger-than-data"],
)
def test_train_refuses_bad_input_in_one_line(cli, tmp_path, flags, message{% if cookiecutter.data_source == "tfrecord" %}, data_dir{% endif %}):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    model_dir = tmp_path / "untouched"
    values = dict(file=blocker, examples={% if cookiecutter.data_source == "tfrecord" %}1024{% elif cookiecutter.task == "image" %}2048{% else %}4096{% endif %}, batch=65536 * {% if cookiecutter.distribution == "mirrored" %}2{% else %}1{% endif %})
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
{%- if cookiecutter.data_source == "tfrecord" %}


def test_shards_without_a_manifest_are_refused_until_indexed(cli, tmp_path, data_dir):
    shards = tmp_path / "shards"
    shutil.copytree(data_dir, shards, ignore=shutil.ignore_patterns("manifest.json"))
    flags = ["--data-dir", str(shards), "--epochs", "1", "--steps-per-epoch", "1"]
    result = cli("train", *flags, "--model-dir", str(tmp_path / "run"){% if cookiecutter.distribution == "mirrored" %}, "--cpu-replicas", "2"{% endif %})
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (
        f"error: no manifest.json in {shards} - run"
        f" `{{ cookiecutter.project_slug }} index --data-dir {shards}` (it reads every shard once"
        " and lists them with their record counts)"
    )
    assert not (tmp_path / "run").exists()
    indexed = cli("index", "--data-dir", str(shards))
    assert indexed.returncode == 0, indexed.stderr[-2000:]
    assert "train: 2 files, 1024 records" in indexed.stdout
    assert (shards / "manifest.json").is_file()


def test_a_record_corrupted_mid_run_stops_in_one_line_naming_its_file(cli, tmp_path, data_dir):
    shards = tmp_path / "shards"
    shutil.copytree(data_dir, shards)
    run = tmp_path / "run"
    flags = ["--data-dir", str(shards), "--model-dir", str(run){% if cookiecutter.distribution == "mirrored" %}, "--cpu-replicas", "2"{% endif %}]
    first = cli("train", "--epochs", "1", *flags)
    assert first.returncode == 0, first.stderr[-2000:]
    saved = sorted(path.name for path in (run / "checkpoints").iterdir())
    # Same size, so the manifest check passes; the record's checksum does not.
    corrupt = shards / "train-00001-of-00002.tfrecord"
    data = bytearray(corrupt.read_bytes())
    data[len(data) // 3] ^= 0xFF
    corrupt.write_bytes(bytes(data))
    second = cli("train", "--epochs", "2", *flags)
    assert second.returncode == 2
    assert "Traceback" not in second.stderr
    last = second.stderr.splitlines()[-1]
    assert last.startswith(f"error: {corrupt} has a corrupt record (corrupted record at "), last
    assert "the last checkpoint is intact" in last
    assert sorted(path.name for path in (run / "checkpoints").iterdir()) == saved
{%- if cookiecutter.task == "image" %}


def test_an_image_truncated_after_index_stops_training_in_one_line_naming_its_file(cli, tmp_path):
    shards = tmp_path / "shards"
    shards.mkdir()
    write_shards(shards, [16, 16])
    run = tmp_path / "run"
    flags = ["--data-dir", str(shards), "--model-dir", str(run), "--per-replica-batch-size", "8"]
{%- if cookiecutter.distribution == "mirrored" %}
    flags += ["--cpu-replicas", "2"]
{%- endif %}
    first = cli("train", "--epochs", "1", *flags)
    assert first.returncode == 0, first.stderr[-2000:]
    saved = sorted(path.name for path in (run / "checkpoints").iterdir())
    latest = tf.train.latest_checkpoint(str(run / "checkpoints"))
    # The shard rewritten with as many records, one image cut in half, and listed at
    # its new size, as an index that read only the JPEG headers (an older version)
    # would list it: planning accepts it, decoding fails.
    shard = shards / "train-00001-of-00002.tfrecord"
    records = [record.numpy() for record in tf.data.TFRecordDataset(str(shard))]
    records[5] = truncated_jpeg_record()
    with tf.io.TFRecordWriter(str(shard)) as writer:
        for record in records:
            writer.write(record)
    listing = read_json(shards / "manifest.json")
    for entry in listing["splits"]["train"]["files"]:
        if entry["file"] == shard.name:
            entry["bytes"] = shard.stat().st_size
    (shards / "manifest.json").write_text(json.dumps(listing))
    second = cli("train", "--epochs", "2", *flags)
    assert second.returncode == 2, second.stderr[-2000:]
    assert "Traceback" not in second.stderr
    assert second.stderr.splitlines()[-1] == (
        f"error: {shard} has a corrupt record (a record the task's format cannot parse) at"
        f" epoch 2 step 0 - restore or regenerate it and run `{INDEX_COMMAND} {shards}`; the"
        " last checkpoint is intact"
    )
    assert sorted(path.name for path in (run / "checkpoints").iterdir()) == saved
    reader = tf.train.load_checkpoint(latest)
    assert reader.get_tensor("epoch/.ATTRIBUTES/VARIABLE_VALUE") == 1
{%- endif %}
{%- endif %}
{%- if cookiecutter.mixed_precision == "bfloat16" %}


def test_bfloat16_on_gpus_without_bfloat16_math_is_refused():
    with pytest.raises(TrainerError) as refused:
        check_bfloat16_gpus([(8, 0), (7, 5)])
    assert str(refused.value) == (
        "mixed_bfloat16 needs GPUs of compute capability 8.0 or newer, but GPU 1 is 7.5"
        " - pass --no-mixed-precision, or bake the project with mixed_precision=float16"
    )


def test_bfloat16_runs_on_ampere_and_newer_gpus_and_on_cpus():
    check_bfloat16_gpus([(8, 0), (9, 0)])
    check_bfloat16_gpus([])  # CPUs: no GPU to check
{%- endif %}
