"""The run in MLflow: one MLflow run per training run, recorded by the chief.

- The run's settings, global batch, replicas, workers and data plan are its
  params; the template's options and the TensorFlow and Keras versions its tags.
- The scalars TensorBoard gets, at the same global steps, are its metrics, and
  the summary's figures (`summary/...`) at the last step.
- A resumed run (a restart, a preemption, a requeue, a rollback) continues the
  same MLflow run: its id is kept in `<model dir>/mlflow_run.json`, written as
  soon as the run exists and again with every checkpoint's scalars, with the
  values not yet sent. A metric's step the MLflow run already holds is not sent
  again, so a kill leaves no step twice and none missing. The file holds a key
  before the run is asked for, and the run is tagged with it: a creation cut
  short (a kill before the id was kept, a reply that timed out) is found again,
  not made twice.
- A sender thread does all the talking to the server: a server that is down or
  slow never stops or slows training. Its first failure is one warning line;
  then it tries again every RETRY_SECONDS, and what it could not send stays in
  `mlflow_run.json` (at most MAX_UNSENT values) for the next run of the same
  model directory, a rerun of a finished run included.

The tracking URI: --tracking-uri, else $MLFLOW_TRACKING_URI, else a SQLite file
`mlflow.db` in the working directory (no server needed).
"""

import collections
import dataclasses
import importlib.metadata
import itertools
import json
import logging
import os
import threading
import time
import uuid
from pathlib import Path

import tensorflow as tf
from mlflow.entities import Metric, Param
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from {{ cookiecutter.package_name }} import TrainerError, first_line, is_remote, write_atomically
from {{ cookiecutter.package_name }}.config import bad_tracking_uri, is_tracking_uri
from {{ cookiecutter.package_name }}.distribute.compat import KERAS_PACKAGE, keras
from {{ cookiecutter.package_name }}.distribute.strategy import worker_count
from {{ cookiecutter.package_name }}.task import METRIC_NAME

log = logging.getLogger(__name__)

STATE_FILE = "mlflow_run.json"
# The tag that names a model directory's MLflow run (its key in mlflow_run.json).
RUN_KEY_TAG = "run_key"
DEFAULT_STORE = "mlflow.db"
DEFAULT_EXPERIMENT = "{{ cookiecutter.project_slug }}"
# The options this project was generated with.
TEMPLATE_OPTIONS = {
    "task": "{{ cookiecutter.task }}",
    "training_loop": "{{ cookiecutter.training_loop }}",
    "distribution": "{{ cookiecutter.distribution }}",
    "keras_package": "{{ cookiecutter.keras_package }}",
    "data_source": "{{ cookiecutter.data_source }}",
    "mixed_precision": "{{ cookiecutter.mixed_precision }}",
    "launcher": "{{ cookiecutter.launcher }}",
    "tracking": "{{ cookiecutter.tracking }}",
}
# The summary's figures logged at the run's end, as summary/<name>.
SUMMARY_FIGURES = (
    "final_loss",
    "final_metric",
    "eval_loss",
    "eval_metric",
    "examples_per_second",
    "seconds_to_first_step",
    "global_step",
    "recoveries",
    "replica_spread",
    "replica_repairs",
    "peak_learning_rate",
)
# A server that fails is tried again this often.
RETRY_SECONDS = 30.0
# A finished run waits this long at most for a server that answers to take the
# last values; a preempted or failed one this long (a preemption's grace period
# is short): what is not sent by then stays in mlflow_run.json. None for a
# server that has failed.
END_WAIT_SECONDS = 30.0
STOP_WAIT_SECONDS = 2.0
# Values kept for a server that does not answer (a few per checkpoint: months of
# checkpoints); later ones are dropped, and counted.
MAX_UNSENT = 20000
# MLflow's log_batch takes at most 1000 metrics and 100 params a call.
METRICS_PER_CALL, PARAMS_PER_CALL = 1000, 100
# A request to the server fails at once rather than retrying for minutes (a
# sender that waits holds the values behind it).
HTTP_SETTINGS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}


class TrackingError(TrainerError):
    pass


def tracking_uri(config):
    """--tracking-uri, else $MLFLOW_TRACKING_URI, else sqlite:///<cwd>/mlflow.db."""
    uri = config.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
    if uri and not is_tracking_uri(uri):
        raise TrackingError(bad_tracking_uri("MLFLOW_TRACKING_URI", uri))
    return uri or default_tracking_uri()


def default_tracking_uri():
    """Where a run records with no URI given: a SQLite file in the working directory."""
    return "sqlite:///" + os.path.abspath(DEFAULT_STORE)


def without_password(uri):
    """`uri` as logs and params show it: no user:password@ in it."""
    scheme, separator, rest = uri.partition("://")
    host, at, path = rest.partition("@")
    if not separator or not at or "/" in host:
        return uri
    return f"{scheme}://***@{path}"


def experiment_name(config):
    """--experiment, else $MLFLOW_EXPERIMENT_NAME, else the project's name."""
    return config.experiment or os.environ.get("MLFLOW_EXPERIMENT_NAME") or DEFAULT_EXPERIMENT


def run_params(config, strategy, plan):
    """The MLflow params of a run: every setting, and what the run made of them."""
    params = dict(dataclasses.asdict(config))
    if config.tracking_uri:
        params["tracking_uri"] = without_password(config.tracking_uri)
    params.update(
        replicas=strategy.num_replicas_in_sync,
        workers=worker_count(strategy),
        global_batch_size=plan.global_batch_size,
        steps_per_epoch=plan.steps_per_epoch,
        steps_per_pass=plan.shards.steps_per_pass,
        training_files=len(plan.train.counts),
        training_examples=sum(plan.train.counts),
        evaluation_examples=sum(plan.evaluation.counts),
    )
    return {name: str(value) for name, value in params.items()}


def run_tags():
    """The template's options (and its commit, for a project made with cruft),
    and the versions of TensorFlow, Keras and the project."""
    tags = {f"template.{name}": value for name, value in TEMPLATE_OPTIONS.items()}
    cruft = Path(__file__).resolve().parents[2] / ".cruft.json"
    if cruft.is_file():
        tags["template.commit"] = str(json.loads(cruft.read_text()).get("commit"))
    tags.update(
        tensorflow_version=tf.__version__,
        keras_package=KERAS_PACKAGE,
        keras_version=keras.__version__,
    )
    try:
        tags["project_version"] = importlib.metadata.version("{{ cookiecutter.project_slug }}")
    except importlib.metadata.PackageNotFoundError:
        pass  # run from a checkout that is not installed
    return tags


def summary_metrics(summary):
    """The summary's figures as {summary/<name>: value} (the task's metric by its name)."""
    figures = {}
    for name in SUMMARY_FIGURES:
        value = summary.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool):
            figures["summary/" + name.replace("metric", METRIC_NAME)] = value
    for name, value in (summary.get("batch_norm_losses") or {}).items():
        figures[f"summary/batch_norm_{name}"] = value
    return figures


def read_state(model_dir):
    """What mlflow_run.json in `model_dir` holds ({} when there is none)."""
    path = os.path.join(model_dir, STATE_FILE)
    if not tf.io.gfile.exists(path):
        return {}
    with tf.io.gfile.GFile(path) as handle:
        try:
            return json.load(handle)
        except json.JSONDecodeError as err:
            raise TrackingError(
                f"{path} is not valid JSON ({err}) - delete it: the run then starts a new"
                " MLflow run"
            ) from None


class MlflowTracker:
    """TensorBoard's scalars, and the same values sent to an MLflow run by a
    sender thread (the module's docstring says what is kept when it cannot)."""

    def __init__(self, tensorboard, config, model_dir, params):
        for name, value in HTTP_SETTINGS.items():
            os.environ.setdefault(name, value)
        self.tensorboard = tensorboard
        self.uri = tracking_uri(config)
        self.shown_uri = without_password(self.uri)
        if int(params["workers"]) > 1 and self.uri == default_tracking_uri():
            log.warning(
                "MLflow records into %s on the chief's own disk: in a cluster's pod it is lost"
                " with the pod, and each restart starts another MLflow run - set"
                " MLFLOW_TRACKING_URI (the manifests' # TRACKING_URI line) or --tracking-uri"
                " to the team's server",
                self.shown_uri,
            )
        self.experiment = experiment_name(config)
        self.model_dir = model_dir
        self.state_path = os.path.join(model_dir, STATE_FILE)
        self.params, self.tags = params, run_tags()
        saved = read_state(model_dir)
        if saved and saved.get("tracking_uri") != self.uri:
            log.info(
                "MLflow: the run was tracked at %s, now at %s: a new MLflow run",
                without_password(str(saved.get("tracking_uri"))),
                self.shown_uri,
            )
            saved = {}
        self.run_id = saved.get("run_id")
        self.run_key = saved.get("run_key") or uuid.uuid4().hex
        self.unsent = collections.deque(tuple(value) for value in saved.get("unsent", []))
        self.dropped = 0
        self.status = None  # how the run ended, once it has
        self.client = None
        self.last_steps = {}  # metric -> the last step the MLflow run holds
        self.new_run = False  # a run this process started holds no steps yet
        self.failing = self.warned = False
        self.recorded = False  # whether this process has recorded (so trained)
        self.lock = threading.Lock()  # the values and the status
        self.write_lock = threading.Lock()  # mlflow_run.json
        # The sender waits for the first values: a run refused on resume (another
        # learning rate, say) leaves its MLflow run as it was.
        self.wake = threading.Event()
        self.sender = threading.Thread(target=self.send_loop, name="mlflow-sender", daemon=True)
        self.sender.start()

    def record(self, global_step, scalars):
        """The scalars to TensorBoard, and queued for MLflow; mlflow_run.json
        keeps them until they are sent (this comes just before a checkpoint)."""
        self.tensorboard.record(global_step, scalars)
        self.recorded = True
        self.queue(global_step, scalars)
        self.save_state()
        self.wake.set()

    def end(self, status, summary=None):
        """The run ended: its last values (the summary's figures) and its status
        go to MLflow, waited for at most END_WAIT_SECONDS, not at all when the
        server has failed."""
        self.tensorboard.end(status, summary)
        if not self.recorded and summary is None:
            return  # stopped before training (a refused resume): the MLflow run is untouched
        if summary is not None:
            self.queue(summary["global_step"], summary_metrics(summary))
        with self.lock:
            self.status = status
        self.save_state()
        self.wake.set()
        if not self.failing:
            self.sender.join(END_WAIT_SECONDS if status == "FINISHED" else STOP_WAIT_SECONDS)
        with self.lock:
            unsent, dropped = len(self.unsent), self.dropped
        if unsent:
            log.info(
                "MLflow: %d values not sent to %s yet: kept in %s, for the next run of"
                " this model directory",
                unsent,
                self.shown_uri,
                self.state_path,
            )
        if dropped:
            log.info(
                "MLflow: %d values dropped: more than %d waited to be sent", dropped, MAX_UNSENT
            )

    def queue(self, global_step, scalars):
        timestamp = int(time.time() * 1000)
        with self.lock:
            for name, value in scalars.items():
                if len(self.unsent) < MAX_UNSENT:
                    self.unsent.append((name, float(value), int(global_step), timestamp))
                else:
                    self.dropped += 1

    def save_state(self):
        """mlflow_run.json: the store, the run's id and the values not sent yet.
        A write that fails is a warning: tracking never stops training."""
        # The snapshot under the write's lock: an older one never overwrites a newer.
        with self.write_lock:
            with self.lock:
                state = {
                    "tracking_uri": self.uri,
                    "experiment": self.experiment,
                    "run_id": self.run_id,
                    "run_key": self.run_key,
                    "unsent": list(self.unsent),
                }
            try:
                write_atomically(self.state_path, json.dumps(state) + "\n")
            except tf.errors.OpError as err:
                self.warn_once(f"cannot write {self.state_path} ({first_line(err.message)})")

    def send_loop(self):
        """The sender thread: sends what is queued when woken, and retries every
        RETRY_SECONDS after a failure; ends with the run's status sent."""
        while True:
            self.wake.wait(timeout=RETRY_SECONDS if self.failing else None)
            self.wake.clear()
            try:
                if self.send():
                    return
                self.failing = False
            except Exception as err:  # anything the server or the client raises: training goes on
                self.forget_positions()
                self.warn_once(f"failed ({first_line(err)})")
                self.failing = True
                if self.status is not None:
                    return  # the run has ended: what is left stays in mlflow_run.json

    def warn_once(self, what):
        if not self.warned:
            self.warned = True
            log.warning(
                "MLflow at %s %s: training goes on, and its values are kept in %s and sent"
                " when the server answers",
                self.shown_uri,
                what,
                self.state_path,
            )

    def forget_positions(self):
        """After a failure: a batch may have been stored though its answer was
        lost, so the steps the run holds are asked again."""
        self.last_steps = {}
        self.new_run = False

    def send(self):
        """Everything queued, in order; with the status once the run has ended.
        True when the status is sent."""
        client = self.connect()
        while True:
            with self.lock:
                batch = list(itertools.islice(self.unsent, METRICS_PER_CALL))
                status = self.status
            if not batch:
                break
            metrics, positions = self.new_metrics(client, batch)
            if metrics:
                client.log_batch(self.run_id, metrics=metrics, synchronous=True)
            self.last_steps.update(positions)  # only once the server holds them
            with self.lock:
                for _ in batch:  # only this thread takes from the left
                    self.unsent.popleft()
        if status is None:
            return False
        self.delete_late_copies(client)
        client.set_terminated(self.run_id, status)
        self.save_state()
        return True

    def delete_late_copies(self, client):
        """Runs with this key other than this one: creations whose reply was lost
        and which the server stored after the retry had looked (they hold nothing:
        values go to this run only)."""
        experiment_id = client.get_run(self.run_id).info.experiment_id
        tagged = f"tags.{RUN_KEY_TAG} = '{self.run_key}'"
        for run in client.search_runs([experiment_id], filter_string=tagged):
            if run.info.run_id != self.run_id:
                client.delete_run(run.info.run_id)

    def new_metrics(self, client, batch):
        """The values of `batch` at steps the MLflow run does not hold yet (a
        resumed run records again the steps after its checkpoint)."""
        metrics, positions = [], {}
        for name, value, step, timestamp in batch:
            if name not in self.last_steps:
                history = [] if self.new_run else client.get_metric_history(self.run_id, name)
                self.last_steps[name] = max((point.step for point in history), default=-1)
            if step > positions.get(name, self.last_steps[name]):
                positions[name] = step
                metrics.append(Metric(name, value, timestamp, step))
        return metrics, positions

    def connect(self):
        """The client, with the MLflow run continued or started (once)."""
        if self.client is not None:
            return self.client
        client = MlflowClient(self.uri)
        run = None
        if self.run_id is not None:
            try:
                run = client.get_run(self.run_id)
            except MlflowException as err:
                if err.error_code != "RESOURCE_DOES_NOT_EXIST":
                    raise
                log.info(
                    "MLflow: run %s is gone from %s: a new MLflow run", self.run_id, self.shown_uri
                )
        if run is None:
            run = self.start_run(client)
        else:
            log.info("MLflow: continuing run %s at %s", self.run_id, self.shown_uri)
        if run.info.status != "RUNNING":
            client.update_run(self.run_id, status="RUNNING")
        # Params are fixed once logged: a resumed run adds the ones it lacks only
        # (settings changed on a resume are in its log, training/run_settings.py).
        params = [
            (name, value) for name, value in self.params.items() if name not in run.data.params
        ]
        self.log_params(client, params)
        self.client = client
        return client

    def start_run(self, client):
        """The run tagged with this model directory's key, when a creation was
        cut short; else a new run."""
        experiment = client.get_experiment_by_name(self.experiment)
        if experiment is None:
            experiment_id, found = client.create_experiment(self.experiment), []
        else:
            experiment_id = experiment.experiment_id
            tagged = f"tags.{RUN_KEY_TAG} = '{self.run_key}'"
            found = client.search_runs([experiment_id], filter_string=tagged, max_results=1)
        if found:
            run = found[0]
        else:
            name = os.path.basename(self.model_dir.rstrip("/"))
            tags = {**self.tags, RUN_KEY_TAG: self.run_key}
            run = client.create_run(experiment_id, tags=tags, run_name=name)
            self.new_run = True
        with self.lock:
            self.run_id = run.info.run_id
        self.save_state()  # from here on, a kill resumes this MLflow run
        log.info(
            "MLflow: run %s in experiment %r at %s", self.run_id, self.experiment, self.shown_uri
        )
        return run

    def log_params(self, client, params):
        for start in range(0, len(params), PARAMS_PER_CALL):
            chunk = [Param(name, value) for name, value in params[start : start + PARAMS_PER_CALL]]
            client.log_batch(self.run_id, params=chunk, synchronous=True)


def tracked_run(model_dir, export_dir):
    """The MLflow client and run of the training run in `model_dir`: looked up
    before an export is written to `export_dir`, so a registration that cannot
    be made leaves no export behind."""
    if is_remote(export_dir):
        raise TrackingError(
            f"--register-model uploads the export from local files, and {export_dir} is a"
            " URL - pass a local --export-dir to export and register"
        )
    state = read_state(model_dir)
    if not state.get("run_id"):
        raise TrackingError(
            f"{model_dir} has no MLflow run ({STATE_FILE}) - train it with this project"
            " first, or export without --register-model"
        )
    client = MlflowClient(state["tracking_uri"])
    try:
        return client, client.get_run(state["run_id"])
    except Exception as err:  # the server's or the client's
        raise TrackingError(
            f"cannot find MLflow run {state['run_id']} at {state['tracking_uri']}:"
            f" {first_line(err)} - check that the tracking server answers, or export"
            " without --register-model"
        ) from None


def register_export(client, run, export_path, model_name):
    """The SavedModel at `export_path` logged to `run` (artifacts
    `saved_model/<version>`) and registered as a new version of `model_name`,
    which names the run; returns that version's number."""
    run_id = run.info.run_id
    path = "saved_model/" + os.path.basename(export_path.rstrip("/"))
    try:
        client.log_artifacts(run_id, export_path, path)
        try:
            client.create_registered_model(model_name)
        except MlflowException as err:
            if err.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
        created = client.create_model_version(
            model_name, f"{run.info.artifact_uri}/{path}", run_id=run_id
        )
    except Exception as err:  # the server's or the client's: the user's request failed
        raise TrackingError(
            f"exported to {export_path}, but cannot register it as a version of"
            f" {model_name!r} (run {run_id}): {first_line(err)} - check that the tracking"
            " server answers, then export again with --register-model"
        ) from None
    return int(created.version)
