"""Runs recorded in MLflow, against a real `mlflow server` on localhost with a
SQLite store: each training run is one MLflow run whose metrics equal the
TensorBoard scalars step for step, killed and resumed or not; a server that
stops mid-run costs one warning line, and what it missed reaches it with the
next run of the same model directory; `export --register-model` registers a
model version that names its run."""

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
from conftest import read_json, run_cli, scalars
from mlflow.tracking import MlflowClient

from {{ cookiecutter.package_name }}.config import ConfigError, TrainConfig
from {{ cookiecutter.package_name }}.task import METRIC_NAME
from {{ cookiecutter.package_name }}.tracking import mlflow_run
from {{ cookiecutter.package_name }}.tracking.mlflow_run import (
    STATE_FILE,
    MlflowTracker,
    TrackingError,
    read_state,
)
from {{ cookiecutter.package_name }}.tracking.tracker import TensorBoardScalars
from {{ cookiecutter.package_name }}.training.controller import UNWATCHED_WRITES_SECONDS

SERVER_START_SECONDS = 120
# 2 epochs of 8 steps, a checkpoint (and the interval's scalars) every 2 steps.
STEPS_PER_EPOCH, CHECKPOINT_EVERY = 8, 2
CHECKPOINT_STEPS = list(range(CHECKPOINT_EVERY, 2 * STEPS_PER_EPOCH + 1, CHECKPOINT_EVERY))
INTERVAL_SCALARS = ("loss", "learning_rate", "examples_per_second", "replica_spread")


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Server:
    """`mlflow server` with a SQLite store and an artifact store under `root`."""

    def __init__(self, root):
        self.root = root
        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.process = None

    def start(self):
        """Start it and wait until it answers; None, or why it did not start."""
        self.root.mkdir(parents=True, exist_ok=True)
        # fmt: off
        command = [
            sys.executable, "-m", "mlflow", "server",
            "--backend-store-uri", f"sqlite:///{self.root / 'mlflow.db'}",
            "--artifacts-destination", str(self.root / "artifacts"),
            "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1",
        ]
        # fmt: on
        log = (self.root / "server.log").open("a")
        # Without its job runner (5 more processes that tracking does not use).
        environment = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        # A session of its own: the server's workers are stopped with it.
        self.process = subprocess.Popen(
            command, stdout=log, stderr=log, env=environment, start_new_session=True
        )
        deadline = time.monotonic() + SERVER_START_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return f"it exited with status {self.process.returncode}: " + self.log_tail()
            try:
                with urllib.request.urlopen(self.uri + "/health", timeout=2) as answer:
                    if answer.status == 200:
                        return None
            except OSError:
                time.sleep(0.5)
        self.stop()
        return f"it did not answer within {SERVER_START_SECONDS} s: " + self.log_tail()

    def log_tail(self):
        lines = (self.root / "server.log").read_text(errors="replace").strip().splitlines()
        return " | ".join(lines[-3:])

    def stop(self):
        """SIGKILL: the server goes away as a crashed or unreachable one does."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def started(root):
    server = Server(root)
    why = server.start()
    if why:
        pytest.skip(f"mlflow server did not start ({why})")
    return server


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    running = started(tmp_path_factory.mktemp("mlflow-server"))
    yield running
    running.stop()


def train_flags(model_dir, experiment, *extra):
    # fmt: off
    return [
        "--model-dir", str(model_dir), "--experiment", experiment,
        "--epochs", "2", "--steps-per-epoch", str(STEPS_PER_EPOCH),
        "--checkpoint-every", str(CHECKPOINT_EVERY), "--steps-per-call", "1",
        "--per-replica-batch-size", "32", "--summary-json", str(model_dir / "summary.json"),
        *extra,
    ]
    # fmt: on


def the_run(uri, experiment):
    """The one MLflow run of `experiment` (there must be exactly one)."""
    client = MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    assert found is not None, f"no experiment {experiment!r} at {uri}"
    runs = client.search_runs([found.experiment_id])
    assert len(runs) == 1, f"{len(runs)} MLflow runs for one training run"
    return client, runs[0]


def history(client, run, name):
    """[(step, value)] of a metric, in step order."""
    points = client.get_metric_history(run.info.run_id, name)
    return sorted((point.step, point.value) for point in points)


def assert_equals_tensorboard(client, run, log_dir):
    """Every TensorBoard scalar is the MLflow metric of the same name, at the
    same steps, with the same values (TensorBoard keeps float32)."""
    written = scalars(log_dir)
    assert set(written) == {*INTERVAL_SCALARS, "eval_loss", f"eval_{METRIC_NAME}"}
    for name, points in written.items():
        recorded = history(client, run, name)
        assert [step for step, _ in recorded] == [step for step, _ in points], name
        assert [value for _, value in recorded] == pytest.approx(
            [value for _, value in points], rel=1e-6
        ), name


def assert_summary_recorded(run, summary):
    metrics = run.data.metrics
    assert metrics["summary/final_loss"] == pytest.approx(summary["final_loss"])
    assert metrics[f"summary/final_{METRIC_NAME}"] == pytest.approx(summary["final_metric"])
    assert metrics["summary/eval_loss"] == pytest.approx(summary["eval_loss"])
    assert metrics["summary/global_step"] == summary["global_step"]


@pytest.fixture(scope="module")
def finished_run(server, tmp_path_factory{% if cookiecutter.data_source == "tfrecord" %}, data_dir{% endif %}):
    """A run trained to the end{% if cookiecutter.distribution == "mirrored" %} on 2 replicas{% else %} by 2 local workers{% endif %}, its URI given by $MLFLOW_TRACKING_URI."""
    model_dir = tmp_path_factory.mktemp("tracked") / "run"
    flags = train_flags(model_dir, "finished"{% if cookiecutter.data_source == "tfrecord" %}, "--data-dir", str(data_dir){% endif %})
    environment = {"MLFLOW_TRACKING_URI": server.uri}
{%- if cookiecutter.distribution == "mirrored" %}
    result = run_cli("train", "--cpu-replicas", "2", *flags, env=environment)
{%- else %}
    result = run_cli("launch", "--workers", "2", "--", "train", *flags, env=environment)
{%- endif %}
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return model_dir, result.stdout + result.stderr


def test_a_run_is_one_mlflow_run_whose_metrics_equal_tensorboards(server, finished_run):
    model_dir, _ = finished_run
    summary = read_json(model_dir / "summary.json")
    assert (summary["replicas"], summary["workers"]) == ({% if cookiecutter.distribution == "mirrored" %}2, 1{% else %}2, 2{% endif %})
    client, run = the_run(server.uri, "finished")
    assert run.info.status == "FINISHED"
    assert read_state(str(model_dir)) == {
        "tracking_uri": server.uri,
        "experiment": "finished",
        "run_id": run.info.run_id,
        "run_key": run.data.tags["run_key"],
        "unsent": [],
    }
    assert [step for step, _ in history(client, run, "loss")] == CHECKPOINT_STEPS
    assert_equals_tensorboard(client, run, model_dir / "logs")
    assert_summary_recorded(run, summary)
    params = run.data.params
    assert params["global_batch_size"] == str(summary["global_batch_size"])
    assert (params["replicas"], params["workers"]) == (
        str(summary["replicas"]),
        str(summary["workers"]),
    )
    assert params["checkpoint_every"] == str(CHECKPOINT_EVERY)
    assert set(TrainConfig.__dataclass_fields__) <= set(params)
    tags = run.data.tags
    assert tags["template.tracking"] == "mlflow"
    assert tags["template.distribution"] == "{{ cookiecutter.distribution }}"
    assert tags["tensorflow_version"].startswith("2.21")
    assert tags["keras_package"] == summary["keras_package"]


def test_export_registers_a_model_version_that_names_its_run(server, finished_run, tmp_path):
    model_dir, _ = finished_run
    result = run_cli(
        "export",
        "--model-dir",
        str(model_dir),
        "--export-dir",
        str(tmp_path / "export"),
        "--register-model",
        "tracked-classifier",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == str(tmp_path / "export" / "1")
    client, run = the_run(server.uri, "finished")
    [version] = client.search_model_versions("name='tracked-classifier'")
    assert version.run_id == run.info.run_id
    assert version.source.endswith("/saved_model/1")
    files = {item.path for item in client.list_artifacts(run.info.run_id, "saved_model/1")}
    assert "saved_model/1/saved_model.pb" in files


def test_export_refuses_a_registration_it_cannot_make_before_writing(finished_run, tmp_path):
    model_dir, _ = finished_run
    bad_name = run_cli("export", "--model-dir", str(model_dir), "--register-model", "a/b")
    assert bad_name.returncode == 2
    assert bad_name.stderr.startswith("error: argument --register-model: 'a/b' is not an MLflow")
    untracked = tmp_path / "untracked"
    untracked.mkdir()
    for name in os.listdir(model_dir):
        if name != STATE_FILE and not os.path.isdir(model_dir / name):
            (untracked / name).write_bytes((model_dir / name).read_bytes())
    result = run_cli("export", "--model-dir", str(untracked), "--register-model", "m")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: {untracked} has no MLflow run ({STATE_FILE}) - train it with this project"
        " first, or export without --register-model"
    )
    assert not (untracked / "export").exists()


def stop_when(command, checkpoints, action, env):
    """Run `command`, calling `action(process)` once its MLflow run exists and
    it has saved `checkpoints` checkpoints; returns the exit code and the log."""
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env
    )
    watchdog = threading.Timer(300, process.kill)  # never hang the suite
    watchdog.start()
    lines, acted = [], False
    try:
        for line in process.stderr:
            lines.append(line)
            saved = sum(seen.startswith("checkpoint: ") for seen in lines)
            tracked = any(seen.startswith("MLflow: run ") for seen in lines)
            if saved >= checkpoints and tracked:
                action(process)
                acted = True
                break
        lines += process.stderr.read().splitlines(keepends=True)
        log = "".join(lines)
        assert acted, "the run ended before it was stopped: " + log[-3000:]
        return process.wait(), log
    finally:
        watchdog.cancel()
        process.kill()


def train_command(model_dir, experiment{% if cookiecutter.data_source == "tfrecord" %}, data_dir{% endif %}):
    flags = train_flags(model_dir, experiment{% if cookiecutter.data_source == "tfrecord" %}, "--data-dir", str(data_dir){% endif %})
    return [sys.executable, "-m", "{{ cookiecutter.package_name }}", "train", *flags]


def tracked_at(uri):
    return {**os.environ, "MLFLOW_TRACKING_URI": uri, "CUDA_VISIBLE_DEVICES": "-1"}


@pytest.mark.processes
def test_a_run_killed_mid_epoch_resumes_into_the_same_mlflow_run(server, tmp_path{% if cookiecutter.data_source == "tfrecord" %}, data_dir{% endif %}):
    model_dir = tmp_path / "run"
    command = train_command(model_dir, "killed"{% if cookiecutter.data_source == "tfrecord" %}, data_dir{% endif %})
    code, _ = stop_when(
        command, 2, lambda process: process.send_signal(signal.SIGKILL), tracked_at(server.uri)
    )
    assert code == -signal.SIGKILL, f"the run ended before it was killed (exit code {code})"
    killed = read_state(str(model_dir))["run_id"]
    result = subprocess.run(
        command, capture_output=True, text=True, env=tracked_at(server.uri), timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"MLflow: continuing run {killed}" in result.stderr
    client, run = the_run(server.uri, "killed")
    assert run.info.run_id == killed and run.info.status == "FINISHED"
    # Each step once, none missing, though both attempts recorded some of them.
    written = scalars(model_dir / "logs")
    for name in INTERVAL_SCALARS:
        assert [step for step, _ in history(client, run, name)] == CHECKPOINT_STEPS, name
    for name in ("loss", "learning_rate"):  # the same in both attempts: the resume is exact
        tensorboard = dict(written[name])
        for step, value in history(client, run, name):
            assert value == pytest.approx(tensorboard[step], rel=1e-5), (name, step)
    summary = read_json(model_dir / "summary.json")
    assert_summary_recorded(run, summary)


@pytest.mark.processes
def test_a_server_stopped_mid_run_costs_one_warning_and_gets_the_rest_later(tmp_path{% if cookiecutter.data_source == "tfrecord" %}, data_dir{% endif %}):
    server = started(tmp_path / "server")
    model_dir = tmp_path / "run"
    command = train_command(model_dir, "stopped"{% if cookiecutter.data_source == "tfrecord" %}, data_dir{% endif %})
    try:
        code, log = stop_when(command, 1, lambda process: server.stop(), tracked_at(server.uri))
        assert code == 0, log[-3000:]
        warnings = [line for line in log.splitlines() if line.startswith("MLflow at ")]
        assert len(warnings) == 1, log[-3000:]
        assert warnings[0].startswith(f"MLflow at {server.uri} failed (")
        assert "training goes on" in warnings[0]
        kept = read_state(str(model_dir))["unsent"]
        assert kept, "the values the server missed are kept"
        assert "values not sent to" in log
        # The server back: a rerun of the finished run sends what it missed.
        assert server.start() is None
        client, run = the_run(server.uri, "stopped")
        assert len(history(client, run, "loss")) < len(CHECKPOINT_STEPS)
        rerun = subprocess.run(
            command, capture_output=True, text=True, env=tracked_at(server.uri), timeout=600
        )
        assert rerun.returncode == 0, rerun.stderr[-3000:]
        client, run = the_run(server.uri, "stopped")
        assert run.info.status == "FINISHED"
        assert_equals_tensorboard(client, run, model_dir / "logs")
        assert read_state(str(model_dir))["unsent"] == []
    finally:
        server.stop()


def tracker(model_dir, uri, experiment, workers=1):
    config = TrainConfig(tracking_uri=uri, experiment=experiment)
    tensorboard = TensorBoardScalars(str(model_dir / "logs"))
    return MlflowTracker(tensorboard, config, str(model_dir), {"workers": str(workers)})


def test_the_default_store_is_a_sqlite_file_in_the_working_directory(tmp_path, monkeypatch, caplog):
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    # The end waits for the values to be sent, however loaded the machine.
    monkeypatch.setattr(mlflow_run, "END_WAIT_SECONDS", 600.0)
    monkeypatch.chdir(tmp_path)
    local = tracker(tmp_path, None, "local")
    local.record(5, {"loss": 0.5})
    local.end("FINISHED")
    client, run = the_run(f"sqlite:///{tmp_path / 'mlflow.db'}", "local")
    assert run.info.status == "FINISHED"
    assert history(client, run, "loss") == [(5, 0.5)]
    assert "on the chief's own disk" not in caplog.text  # one machine: the store is its own


def test_several_workers_recording_into_the_default_store_warn_in_one_line(
    tmp_path, monkeypatch, caplog
):
    # In a cluster's pod the default store is lost with the pod, silently.
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    monkeypatch.chdir(tmp_path)
    tracker(tmp_path / "default", None, "cluster", workers=2).end("FINISHED")
    warned = [m for m in caplog.messages if "on the chief's own disk" in m]
    assert warned == [
        f"MLflow records into sqlite:///{tmp_path / 'mlflow.db'} on the chief's own disk: in a"
        " cluster's pod it is lost with the pod, and each restart starts another MLflow run -"
        " set MLFLOW_TRACKING_URI (the manifests' # TRACKING_URI line) or --tracking-uri to"
        " the team's server"
    ]
    caplog.clear()
    given = f"sqlite:///{tmp_path / 'team.db'}"
    tracker(tmp_path / "given", given, "cluster", workers=2).end("FINISHED")
    assert "on the chief's own disk" not in caplog.text


@pytest.mark.parametrize("uri", ["mlflow.internal:5000", "./mlruns", "ftp://host"])
def test_a_tracking_uri_mlflow_does_not_take_is_refused_in_one_line(uri):
    with pytest.raises(ConfigError) as refused:
        TrainConfig(tracking_uri=uri)
    assert str(refused.value).startswith(f"tracking_uri={uri!r} is not an MLflow tracking URI")
    assert TrainConfig(tracking_uri="postgresql+psycopg2://db/mlflow").tracking_uri


def test_a_damaged_state_file_is_refused_in_one_line(tmp_path):
    (tmp_path / STATE_FILE).write_text('{"run_id": ')
    with pytest.raises(TrackingError) as refused:
        read_state(str(tmp_path))
    assert str(refused.value).startswith(f"{tmp_path / STATE_FILE} is not valid JSON (")
    assert str(refused.value).endswith("- delete it: the run then starts a new MLflow run")


def test_a_resumed_tracker_keeps_each_step_once_the_first_value(server, tmp_path):
    first = tracker(tmp_path, server.uri, "steps")
    for step in (2, 4, 6):
        first.record(step, {"loss": float(step)})
    first.end("KILLED")
    client, run = the_run(server.uri, "steps")
    assert run.info.status == "KILLED"
    # The resumed run records again from its checkpoint at step 2.
    second = tracker(tmp_path, server.uri, "steps")
    for step in (4, 6, 8):
        second.record(step, {"loss": step + 0.5})
    second.end("FINISHED", None)
    client, run = the_run(server.uri, "steps")
    assert run.info.status == "FINISHED"
    assert history(client, run, "loss") == [(2, 2.0), (4, 4.0), (6, 6.0), (8, 8.5)]


def test_an_unreachable_server_warns_once_and_keeps_the_values(tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(mlflow_run, "MAX_UNSENT", 4)
    uri = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    caplog.set_level(logging.INFO, logger=mlflow_run.__name__)
    dead = tracker(tmp_path, uri, "dead")
    for step in range(1, 4):
        dead.record(step, {"loss": 1.0, "learning_rate": 0.1})
    dead.end("FINISHED")
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and warnings[0].getMessage().startswith(f"MLflow at {uri} failed")
    state = json.loads((tmp_path / STATE_FILE).read_text())
    assert state["run_id"] is None
    assert [value[:3] for value in state["unsent"]] == [
        ["loss", 1.0, 1],
        ["learning_rate", 0.1, 1],
        ["loss", 1.0, 2],
        ["learning_rate", 0.1, 2],
    ]
    assert "MLflow: 2 values dropped: more than 4 waited to be sent" in caplog.text


def test_a_server_that_never_answers_holds_up_no_record_nor_a_preemption(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "60")  # each request waits 60 s
    monkeypatch.setattr(mlflow_run, "END_WAIT_SECONDS", 600.0)
    with socket.socket() as silent:  # takes connections (its backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        slow = tracker(tmp_path, f"http://127.0.0.1:{silent.getsockname()[1]}", "slow")
        took = []
        for step in range(1, 4):
            started = time.monotonic()
            slow.record(step, {"loss": 1.0})
            took.append(time.monotonic() - started)
        started = time.monotonic()
        slow.end("KILLED")  # a SIGTERM's grace period is short
        took.append(time.monotonic() - started)
    assert max(took) < 30, f"waited for the server: {took}"
    assert len(read_state(str(tmp_path))["unsent"]) == 3


def test_values_a_server_missed_while_down_are_sent_when_it_answers_again(
    server, tmp_path, monkeypatch
):
    monkeypatch.setattr(mlflow_run, "RETRY_SECONDS", 0.2)
    down = threading.Event()
    log_batch = MlflowClient.log_batch

    def failing_while_down(self, *args, **kwargs):
        if down.is_set():
            raise ConnectionError("the server is down")
        return log_batch(self, *args, **kwargs)

    monkeypatch.setattr(MlflowClient, "log_batch", failing_while_down)
    outage = tracker(tmp_path, server.uri, "outage")
    outage.record(2, {"loss": 2.0})
    down.set()
    for step in (4, 6, 8):
        outage.record(step, {"loss": float(step)})
    time.sleep(1)  # the sender fails and waits to retry
    down.clear()
    outage.record(10, {"loss": 10.0})
    outage.end("FINISHED")  # no wait: the server failed lately
    outage.sender.join(timeout=60)  # the sender goes on, while the process lives
    client, run = the_run(server.uri, "outage")
    assert history(client, run, "loss") == [(2, 2.0), (4, 4.0), (6, 6.0), (8, 8.0), (10, 10.0)]
    assert run.info.status == "FINISHED"
    assert read_state(str(tmp_path))["unsent"] == []


def test_a_run_whose_creation_was_cut_short_is_found_by_its_key_not_made_twice(
    server, tmp_path, monkeypatch
):
    # The server made the run but its reply was lost (a timeout; a kill before
    # the id was written is the same): the next try finds it by the key that
    # mlflow_run.json held before the run was asked for.
    monkeypatch.setattr(mlflow_run, "RETRY_SECONDS", 0.2)
    create_run = MlflowClient.create_run
    made = []

    def reply_lost_once(self, *args, **kwargs):
        run = create_run(self, *args, **kwargs)
        made.append(run.info.run_id)
        if len(made) == 1:
            raise TimeoutError("the reply timed out")
        return run

    monkeypatch.setattr(MlflowClient, "create_run", reply_lost_once)
    cut_short = tracker(tmp_path, server.uri, "cut short")
    cut_short.record(2, {"loss": 2.0})
    time.sleep(1)  # the sender fails and tries again
    cut_short.record(4, {"loss": 4.0})
    cut_short.end("FINISHED")
    cut_short.sender.join(timeout=60)
    client, run = the_run(server.uri, "cut short")
    assert made == [run.info.run_id]
    assert run.data.tags["run_key"] == read_state(str(tmp_path))["run_key"]
    assert history(client, run, "loss") == [(2, 2.0), (4, 4.0)]
    assert run.info.status == "FINISHED"


def test_a_run_the_server_stored_after_the_retry_looked_is_deleted_at_the_end(
    server, tmp_path, monkeypatch
):
    # A queued server stores the first creation only after the retry has looked
    # for it and made another: the copy, which holds nothing, goes at the end.
    monkeypatch.setattr(mlflow_run, "RETRY_SECONDS", 0.2)
    create_run = MlflowClient.create_run
    late, asked = [], threading.Event()

    def stored_late_once(self, *args, **kwargs):
        if not late:
            late.append(threading.Timer(1.5, create_run, (self, *args), kwargs))
            late[0].start()
            asked.set()
            raise TimeoutError("the reply timed out")
        return create_run(self, *args, **kwargs)

    monkeypatch.setattr(MlflowClient, "create_run", stored_late_once)
    queued = tracker(tmp_path, server.uri, "stored late")
    queued.record(2, {"loss": 2.0})
    assert asked.wait(timeout=60)
    late[0].join()
    queued.record(4, {"loss": 4.0})
    queued.end("FINISHED")
    queued.sender.join(timeout=60)
    client, run = the_run(server.uri, "stored late")
    assert run.info.run_id == read_state(str(tmp_path))["run_id"]
    assert history(client, run, "loss") == [(2, 2.0), (4, 4.0)]
    assert run.info.status == "FINISHED"


def test_a_run_that_stops_before_training_leaves_its_mlflow_run_as_it_was(server, tmp_path):
    first = tracker(tmp_path, server.uri, "untouched")
    first.record(2, {"loss": 2.0})
    first.end("FINISHED")
    # A rerun refused on resume (another learning rate, say) ends before any step.
    tracker(tmp_path, server.uri, "untouched").end("FAILED")
    _, run = the_run(server.uri, "untouched")
    assert run.info.status == "FINISHED"


def test_credentials_in_the_tracking_uri_are_not_shown(monkeypatch):
    assert mlflow_run.without_password("https://me:token@mlflow.internal/x") == (
        "https://***@mlflow.internal/x"
    )
    assert mlflow_run.without_password("sqlite:////data/mlflow.db") == "sqlite:////data/mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "mlflow.internal:5000")
    with pytest.raises(TrackingError, match=r"^MLFLOW_TRACKING_URI='mlflow.internal:5000' is not"):
        mlflow_run.tracking_uri(TrainConfig())


def test_registering_an_export_to_a_url_is_refused_before_it_is_written(tmp_path):
    with pytest.raises(TrackingError, match=r"^--register-model uploads the export from local"):
        mlflow_run.tracked_run(str(tmp_path), "gs://bucket/exports")


def test_the_other_workers_wait_at_the_end_for_the_chiefs_last_values_to_mlflow():
    # The chief sends them after its watchdog stops, within the end barrier's
    # allowance for such writes: otherwise the other workers would leave first.
    assert UNWATCHED_WRITES_SECONDS > mlflow_run.END_WAIT_SECONDS
