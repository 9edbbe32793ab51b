"""Test set-up: two logical CPU devices stand in for two GPUs.

The split must happen before TensorFlow initializes its devices, so it runs
here, at import time, before any test touches TensorFlow.
"""

import functools
import importlib
import json
import operator
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Deterministic kernels (what --deterministic turns on), here and in the training
# processes tests start: the tests compare weights bit for bit (reruns, resumes,
# replica copies), and a scatter-based update (an Embedding's sparse gradient,
# on CPUs too) rounds differently from run to run and from replica to replica.
os.environ.setdefault("TF_DETERMINISTIC_OPS", "1")
# The package first: it selects the Keras package before TensorFlow loads.
importlib.import_module("{{ cookiecutter.package_name }}")

REPLICAS = 2
# The training loops this project has (tests parametrized over them).
{%- if cookiecutter.training_loop == "both" %}
LOOPS = ["fit", "custom"]
{%- else %}
LOOPS = ["{{ cookiecutter.training_loop }}"]
{%- endif %}

import tensorflow as tf  # noqa: E402

# Where disable_op_determinism lives: TensorFlow exports enable_op_determinism only.
from tensorflow.python.framework import config as tf_config  # noqa: E402

tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0],
    [tf.config.LogicalDeviceConfiguration()] * REPLICAS,
)

import h5py  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from {{ cookiecutter.package_name }}.checks.probe import without_randomness  # noqa: E402
from {{ cookiecutter.package_name }}.config import TrainConfig  # noqa: E402
{%- if cookiecutter.data_source == "tfrecord" %}
from {{ cookiecutter.package_name }}.data.manifest import index  # noqa: E402
{%- endif %}
from {{ cookiecutter.package_name }}.data.pipeline import ArraySource  # noqa: E402
{%- if cookiecutter.data_source == "tfrecord" %}
from {{ cookiecutter.package_name }}.data.record_format import encode  # noqa: E402
from {{ cookiecutter.package_name }}.data.sources import make_data  # noqa: E402
from {{ cookiecutter.package_name }}.data.tfrecords import shard_name, write_split  # noqa: E402
{%- endif %}
from {{ cookiecutter.package_name }}.distribute.compat import is_distributed, keras, replica_copies  # noqa: E402
{%- if cookiecutter.distribution == "multi_worker" %}
from {{ cookiecutter.package_name }}.distribute.launch import (  # noqa: E402
    free_ports,
    worker_environment,
    worker_tf_configs,
)
{%- endif %}
from {{ cookiecutter.package_name }}.distribute.strategy import mirrored_strategy  # noqa: E402
from {{ cookiecutter.package_name }}.task import build_model, sample_examples  # noqa: E402
from {{ cookiecutter.package_name }}.training.assembly import (  # noqa: E402
    build_engine,
    plan_run,
    prepare_run,
    train,
)


def pytest_collection_modifyitems(config, items):
    if tf.config.list_physical_devices("GPU"):
        return
    skip = pytest.mark.skip(reason="no GPU visible")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)

{%- if cookiecutter.tracking == "mlflow" %}


@pytest.fixture(scope="session", autouse=True)
def mlflow_store(tmp_path_factory):
    """The runs tests train are recorded in a SQLite store of the session's own,
    not in mlflow.db in the working directory (the tests of a server start one)."""
    store = tmp_path_factory.mktemp("mlflow") / "mlflow.db"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{store}")
        yield store
{%- endif %}


@pytest.fixture(autouse=True)
def default_kernels_for_upstream_tests(request, monkeypatch):
    """Tests of an upstream bug (marker `upstream`) run on TensorFlow's default
    kernels, as users meet the bug: keras#19005 does not show under op
    determinism, which the other tests run with."""
    if request.node.get_closest_marker("upstream") is None:
        yield
        return
    monkeypatch.setenv("TF_DETERMINISTIC_OPS", "0")  # for the processes it starts
    tf_config.disable_op_determinism()
    try:
        yield
    finally:
        tf_config.enable_op_determinism()


@pytest.fixture
def two_replicas():
    return mirrored_strategy([f"/cpu:{index}" for index in range(REPLICAS)])


@pytest.fixture
def one_device():
    """The single-device reference: a one-device MirroredStrategy, so it runs the
    same strategy code as N replicas (the doctor compares against it too)."""
    return mirrored_strategy(["/cpu:0"])


def assert_in_sync(strategy, variables):
    """Every variable is mirrored and its replica copies are identical."""
    assert variables
    for variable in variables:
        assert is_distributed(variable), f"{variable.name} is not distributed"
        first, *others = replica_copies(strategy, variable)
        for other in others:
            np.testing.assert_array_equal(first, other, err_msg=variable.name)


# Whether the task's inputs hold strings (a column looked up in the model):
# XLA compiles no string ops, and --jit-compile is refused for such a model.
STRING_INPUTS = any(
    np.asarray(values).dtype.kind in "OSU"
    for values in tf.nest.flatten(sample_examples(1, seed=0)[0])
)


def assert_same_statistics(found, expected, rtol=1e-9):
    """Statistics (nested lists and numbers, or strings: a vocabulary) equal to
    within float rounding."""
    assert found.keys() == expected.keys()
    for key in expected:
        if np.asarray(expected[key]).dtype.kind in "OSU":
            assert found[key] == expected[key], key
        else:
            np.testing.assert_allclose(found[key], expected[key], rtol=rtol, err_msg=key)


def each_example(inputs, labels):
    """A batch as [(one example's inputs, its label)]: numpy arrays or tensors,
    the inputs one array or a dict of them (the task's)."""
    inputs, labels = tf.nest.map_structure(np.asarray, (inputs, labels))
    return [
        (tf.nest.map_structure(operator.itemgetter(index), inputs), labels[index])
        for index in range(len(labels))
    ]


@functools.cache
def sample_statistics():
    """The statistics (task.statistics_from) of the task's sample data: what
    build_model takes where a test builds a model outside a run."""
    return ArraySource(*sample_examples(1024, seed=0)).statistics()


def load_weights(path):
    """The weights saved at `path`, loaded into a fresh model from the builder
    (the training data's statistics are constants of the model, not weights)."""
    model = build_model(sample_statistics())
    model.load_weights(path)
    return model.get_weights()


def trainable_weights(path):
    """The trainable weights saved at `path`, in the model's variable order."""
    model = build_model(sample_statistics())
    model.load_weights(path)
    return [variable.numpy() for variable in model.trainable_variables]


def build_model_with_random_layers(statistics):
    """The project's model with Gaussian noise, dropped out, added to its outputs,
    as users' models have random layers: noise of its own scale, whatever the
    outputs' (a regression's may be far from 0)."""
    model = build_model(statistics)
    outputs = model.outputs[0]
    noise = keras.layers.GaussianNoise(0.1, dtype="float32")(outputs * 0.0)
    return keras.Model(model.inputs, outputs + keras.layers.Dropout(0.5, dtype="float32")(noise))
{%- if cookiecutter.mixed_precision != "no" %}


def assert_mixed_precision(model, optimizer):
    """{{ cookiecutter.mixed_precision }} compute in the layers with weights, float32 weights and
    outputs (the task sets its output layers' dtype)."""
    # Whatever the task's model: its layers with weights compute in
    # {{ cookiecutter.mixed_precision }} but those it keeps in float32 (its outputs'): half or more.
    computing = [layer.compute_dtype for layer in model.layers if layer.trainable_weights]
    assert computing.count("{{ cookiecutter.mixed_precision }}") >= len(computing) / 2, computing
    assert {tf.as_dtype(output.dtype) for output in model.outputs} == {tf.float32}
    assert {tf.as_dtype(weight.dtype) for weight in model.weights} == {tf.float32}
{%- if cookiecutter.mixed_precision == "float16" %}
    # float16 gradients underflow without loss scaling.
    assert "LossScaleOptimizer" in type(optimizer).__name__
{%- else %}
    # bfloat16 has float32's exponent range: no loss scaling.
    assert "LossScaleOptimizer" not in type(optimizer).__name__
{%- endif %}
{%- endif %}


def saved_arrays(path):
    """The model's arrays in the weights file at `path` (its layers', not the
    optimizer's or metrics' that tf_keras's fit saves too), by their path in the
    file: read without building a model, so the runs compared may train any model."""
    arrays = {}

    def keep(name, item):
        if isinstance(item, h5py.Dataset) and name.startswith("layers/"):
            arrays[name] = item[()]

    with h5py.File(path, "r") as saved:
        saved.visititems(keep)
    return arrays


def assert_same_weights(path_a, path_b, atol):
    left, right = saved_arrays(path_a), saved_arrays(path_b)
    assert left and sorted(left) == sorted(right)
    for name, array in left.items():
        np.testing.assert_allclose(array, right[name], rtol=0, atol=atol, err_msg=name)


# N replicas and one device trained alike differ by float rounding, which a deep
# network amplifies step after step, by how much depends on the CPU's kernels:
# MobileNetV3Small with synchronized batch normalization ends sgd_config's 4
# steps apart by 1.5e-3 of what training changed (the largest change of a
# trainable weight) on one machine, by 0.11 on another (an AMD EPYC without
# AVX-512: its depthwise kernels' gradients, sums with much cancellation). Run
# in float64 the same first step agrees to 3e-7: rounding, not a sync fault. A
# sync fault moves the weights by most of the change: 0.58 for per-replica batch
# normalization (1.4 after its first step), 1.3 for a loss scaled by the local
# batch.
TRAINED_ALIKE_SHARE = 0.25


def assert_trained_alike(distributed, single, config, strategy):
    """The trainable weights of the runs `distributed` and `single` (their
    summaries) agree to TRAINED_ALIKE_SHARE of what training changed from the
    weights a run of `config` starts from (the same seed and builder, on
    `strategy`). Batch normalization's moving statistics are left to the
    held-out loss, which is computed with them (assert_losses_alike): they are
    not trained, and the synchronized layer's E[x^2] - E[x]^2 rounds them apart
    by their own measure."""
    plan = plan_run(config, strategy)
    prepare_run(config)
    model = build_engine(config, strategy, plan, plan.train.statistics()).model
    start = trainable_arrays(model)
    model.load_weights(distributed["weights_path"])
    left = trainable_arrays(model)
    model.load_weights(single["weights_path"])
    right = trainable_arrays(model)
    changed = max(
        float(np.max(np.abs(after - before))) for after, before in zip(right, start, strict=True)
    )
    assert changed > 0, "training changed no weight"
    for position, variable in enumerate(model.trainable_variables):
        np.testing.assert_allclose(
            left[position],
            right[position],
            rtol=0,
            atol=TRAINED_ALIKE_SHARE * changed,
            err_msg=f"trainable variable {position} ({variable.name})",
        )


def trainable_arrays(model):
    return [variable.numpy() for variable in model.trainable_variables]


# Their reported losses differ by the same rounding (MobileNetV3Small, 2 epochs:
# 1.6e-4 of the loss), while a reporting fault (one replica's share of the batch,
# a sum for a mean) moves them by percents.
LOSSES_ALIKE_SHARE = 1e-3


def assert_losses_alike(distributed, single):
    """The epochs' mean losses and the held-out loss of the runs `distributed`
    and `single` (their summaries) agree to LOSSES_ALIKE_SHARE of their values."""
    np.testing.assert_allclose(
        distributed["losses"], single["losses"], rtol=LOSSES_ALIKE_SHARE, atol=1e-6
    )
    np.testing.assert_allclose(
        distributed["eval_loss"], single["eval_loss"], rtol=LOSSES_ALIKE_SHARE, atol=1e-6
    )


def assert_clipped_like_one_device(two_replicas, one_device, sgd_config, loop):
    """With --clip-norm far below the gradient's norm (every step clipped), 2
    replicas train as one device does on the same global batch. Clipping each
    replica's share of the gradient (an optimizer's clipnorm in Keras 3) would
    move the weights up to twice as far."""
    distributed = train(sgd_config("two", 64, clip_norm=0.01, **loop), two_replicas)
    config = sgd_config("one", 128, clip_norm=0.01, **loop)
    single = train(config, one_device)
    assert_losses_alike(distributed, single)
    assert_trained_alike(distributed, single, config, one_device)
    unclipped = train(sgd_config("unclipped", 128, **loop), one_device)
    with pytest.raises(AssertionError):  # the clipping did change the training
        assert_trained_alike(unclipped, single, config, one_device)


def with_every_engine_model(monkeypatch, change):
    """Make each engine build `change(model)` of the model it builds."""
    for loop in LOOPS:
        module = importlib.import_module(f"{{ cookiecutter.package_name }}.training.engine_{loop}")
        monkeypatch.setattr(module, "build_model", changed_builder(module.build_model, change))


def changed_builder(build, change):
    return lambda statistics: change(build(statistics))


class Unnormalized(keras.layers.Layer):
    """The identity, called as the BatchNormalization it stands for was."""

    def call(self, inputs, **kwargs):
        return inputs


def without_batch_norm_layers(model):
    """`model` rebuilt with the identity in place of each BatchNormalization
    (nested models too); `model` itself when it has none."""
    layers = model._flatten_layers()
    if not any(isinstance(layer, keras.layers.BatchNormalization) for layer in layers):
        return model

    def replace(layer):
        if isinstance(layer, keras.layers.BatchNormalization):
            return Unnormalized(name=layer.name)
        if isinstance(layer, keras.Model):
            return without_batch_norm_layers(layer)
        return layer.__class__.from_config(layer.get_config())

    return keras.models.clone_model(model, clone_function=replace)


@pytest.fixture
def without_batch_norm(monkeypatch):
    """The project's model without batch normalization, which normalizes each
    micro-batch of an accumulated update, not the update's global batch (see
    docs/training.md): the model gradient accumulation is compared with one device on."""
    with_every_engine_model(monkeypatch, without_batch_norm_layers)


@pytest.fixture
def without_random_layers(monkeypatch):
    """The project's model with its random layers (Dropout, noise, augmentation)
    in inference mode, as the doctor compares: N replicas draw other numbers
    than one device, by design, so they agree only without them."""
    with_every_engine_model(monkeypatch, switched_off)


def switched_off(model):
    left_on = without_randomness(model)
    assert not left_on, f"random layers that cannot be switched off: {left_on}"
    return model


def assert_accumulated_like_one_device(two_replicas, one_device, sgd_config, loop):
    """--accumulate-steps 2 on 2 replicas of 32 trains as one device on 128: the
    same global batch, rate, steps, losses and weights. Scaling a micro-batch's
    loss by its own global batch (64) would double each update, and updating
    after each micro-batch would take twice the steps."""
    accumulated = train(sgd_config("accumulated", 32, accumulate_steps=2, **loop), two_replicas)
    config = sgd_config("one", 128, **loop)
    single = train(config, one_device)
    assert accumulated["accumulate_steps"] == 2
    assert accumulated["global_batch_size"] == single["global_batch_size"] == 128
    assert accumulated["global_step"] == single["global_step"]
    assert accumulated["peak_learning_rate"] == single["peak_learning_rate"]
    assert_losses_alike(accumulated, single)
    assert_trained_alike(accumulated, single, config, one_device)


@pytest.fixture
def sgd_config(tmp_path{% if cookiecutter.data_source == "tfrecord" %}, data_dir{% endif %}):
    """Configs for equivalence checks: plain SGD under the float32 policy (Adam
    hides loss-scaling errors; float16 rounds differently on N replicas). Few,
    gentle steps: a deep network amplifies float rounding step after step (see
    TRAINED_ALIKE_SHARE), a sync fault shows from the first. The rate is
    constant, and scaled by the global batch as a run's is (from a reference of
    128, the global batch of most of these tests)."""

    def make(name, per_replica_batch_size, **overrides):
        values = dict(
            epochs=2,
            optimizer="sgd",
            momentum=0.0,
            reference_batch_size=128,
            warmup_steps=0,
            lr_schedule="constant",
{%- if cookiecutter.task == "image" %}
            learning_rate=0.001,
            steps_per_epoch=2,
{%- else %}
            learning_rate=0.05,
{%- endif %}
            per_replica_batch_size=per_replica_batch_size,
            model_dir=str(tmp_path / name),
{%- if cookiecutter.mixed_precision != "no" %}
            mixed_precision=False,
{%- endif %}
{%- if cookiecutter.data_source == "tfrecord" %}
            data_dir=str(data_dir),
{%- endif %}
        )
        values.update(overrides)
        return TrainConfig(**values)

    return make
{%- if cookiecutter.mixed_precision != "no" %}


@pytest.fixture(autouse=True)
def float32_policy():
    """A test that switches to mixed precision does not leak it into the next one."""
    yield
    keras.mixed_precision.set_global_policy("float32")
{%- endif %}
{%- if cookiecutter.data_source == "tfrecord" %}


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory):
    """A small TFRecord data set written by the project's own make-data code."""
    path = tmp_path_factory.mktemp("data")
    make_data(path, num_files=2, examples=1024)
    return path


def encoded(examples):
    """Each example as the task's record: the same records, the same examples."""
    return [encode(inputs, label) for inputs, label in examples]


def write_shards(path, counts, by_label=False):
    """Training files holding the given numbers of records (and one eval file), indexed;
    `by_label`: the records written in label order, as a careless conversion would."""
    examples = each_example(*sample_examples(sum(counts), seed=0))
    if by_label:
        examples.sort(key=lambda example: example[1].tolist())  # stable: in label order
    ends = np.cumsum(counts)
    for number, (start, end) in enumerate(zip(ends - counts, ends, strict=True)):
        with tf.io.TFRecordWriter(str(path / shard_name("train", number, len(counts)))) as writer:
            for record in encoded(examples[start:end]):
                writer.write(record)
    write_split(path, "eval", *sample_examples(10, seed=1), num_files=1)
    index(str(path))
{%- if cookiecutter.task == "image" %}


def truncated_jpeg_record(label=1):
    """A record of the format whose JPEG is cut in half (a copy that stopped
    early): its header reads, its image does not decode."""
    images, _ = sample_examples(1, seed=0)
    jpeg = tf.io.encode_jpeg(images[0]).numpy()
    return encode(jpeg[: len(jpeg) // 2], label)
{%- endif %}
{%- endif %}


@pytest.fixture
def cli():
    return run_cli


def run_cli(*args, cwd=None, env=None, gpus=False):
    """Run the project's CLI in a fresh process (a fresh TensorFlow); GPUs hidden
    unless `gpus`."""
    environment = {**os.environ, **(env or {})}
    if not gpus:
        environment["CUDA_VISIBLE_DEVICES"] = "-1"
    return subprocess.run(
        [sys.executable, "-m", "{{ cookiecutter.package_name }}", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=environment,
        timeout=600,
    )


def parsing_also(load_sources, transform):
    """load_sources whose training source parses batches as transform(features, labels)."""

    class Transformed:
        def __init__(self, source):
            self.source = source

        def __getattr__(self, name):
            return getattr(self.source, name)

        def parse(self, *records_and_keys):
            return transform(*self.source.parse(*records_and_keys))

    def load(config):
        train, evaluation = load_sources(config)
        return Transformed(train), evaluation

    return load


def scalars(log_dir):
    """{tag: [(global step, value)]} of the TensorBoard scalars written under `log_dir`."""
    found = {}
    for path in sorted(Path(log_dir).glob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                number = float(tf.make_ndarray(value.tensor))
                found.setdefault(value.tag, []).append((event.step, number))
    return found


def read_json(path):
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def check_lines(output):
    """{check name: (passed, detail)} from the PASS/WARN/FAIL lines of a check
    command (a warning passes)."""
    lines = [line for line in output.splitlines() if line.startswith(("PASS ", "WARN ", "FAIL "))]
    return {
        line[5:].split(": ", 1)[0]: (not line.startswith("FAIL"), line.split(": ", 1)[1])
        for line in lines
    }


def wait_until_tensorflow_loads(pid, process):
    """Wait until process `pid` (in this PID namespace; `process` the one started)
    maps TensorFlow's library: its SIGTERM handler is installed before TensorFlow
    is imported."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if "tensorflow" in Path(f"/proc/{pid}/maps").read_text():
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"process {pid} never loaded TensorFlow (exit code {process.poll()})")


def outer_pid_of_child(parent_pid, process):
    """The PID, in this namespace, of the one child of `parent_pid` (`process`)."""
    deadline = time.monotonic() + 30
    children = Path(f"/proc/{parent_pid}/task/{parent_pid}/children")
    while time.monotonic() < deadline and process.poll() is None:
        found = children.read_text().split()
        if found:
            return int(found[0])
        time.sleep(0.05)
    raise AssertionError(f"process {parent_pid} started no child")


# The project's command, each batch of its training input half a second late:
# a resume's skip through the data takes that long a batch (as hundreds of GB
# do). SIGTERM is caught first, as the command does.
SLOW_INPUT = """
from {{ cookiecutter.package_name }}.distribute import preemption

preemption.catch_from_start()

import runpy, time
import tensorflow as tf
from {{ cookiecutter.package_name }}.data import pipeline

def late(positions):
    time.sleep(0.5)
    return positions

def slowed(positions, records):
    delayed = tf.py_function(late, [positions], positions.dtype)
    delayed.set_shape(positions.shape)
    return delayed, records

batch_records = pipeline.batch_records
pipeline.batch_records = lambda records, size: batch_records(records, size).map(slowed)
runpy.run_module("{{ cookiecutter.package_name }}", run_name="__main__", alter_sys=True)
"""
{%- if cookiecutter.distribution == "multi_worker" %}


def run_on_workers(script, workers):
    """Python `script` run by each worker of a localhost cluster of `workers`
    (its TF_CONFIG set, CPUs only): each worker's (stdout, stderr), all exited 0."""
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", script],
            env=worker_environment(tf_config, "-1"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for tf_config in worker_tf_configs(free_ports(workers))
    ]
    outputs = []
    try:
        for process in processes:
            output, errors = process.communicate(timeout=300)
            assert process.returncode == 0, errors[-3000:]
            outputs.append((output, errors))
    finally:
        for process in processes:
            process.kill()
    return outputs
{%- endif %}
