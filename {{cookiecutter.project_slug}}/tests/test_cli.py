"""The command line, end to end, in fresh processes."""

from conftest import load_weights, read_json


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
    assert len(load_weights(summary["weights_path"])) == 6
    assert f"replicas: {summary['replicas']}" in result.stderr


def test_bad_flag_is_one_line_error(cli):
    result = cli("train", "--epochs", "0")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "error: argument --epochs: '0' is not a whole number of at least 1"
        " - run '{{ cookiecutter.project_slug }} train --help' for usage"
    ]


def test_bad_config_file_is_one_line_error(cli, tmp_path):
    config = tmp_path / "bad.toml"
    config.write_text("epochs = 2\nbatch_size = 8\n", encoding="utf-8")
    result = cli("train", "--config", str(config))
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith(f"error: config file {config}: unknown key 'batch_size'")
{%- if cookiecutter.distribution == "multi_worker" %}


def test_cpu_replicas_is_refused_for_multi_worker(cli):
    result = cli("train", "--cpu-replicas", "2")
    assert result.returncode == 2
    assert "one CPU replica per worker" in result.stderr
    assert "launch --workers N -- train" in result.stderr


def test_malformed_tf_config_is_refused_before_training(cli, tmp_path):
    result = cli("train", "--model-dir", str(tmp_path), env={"TF_CONFIG": '{"cluster": '})
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1].startswith("error: TF_CONFIG is not valid JSON")
    assert not list(tmp_path.iterdir())
{%- endif %}
