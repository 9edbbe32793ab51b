"""The doctor passes on this project's training code, and fails, naming the
right check and cause, on each classic way to break distribution silently.
The broken variants replace the project's own functions, as a user's edit would.
"""

{%- if cookiecutter.distribution == "mirrored" %}
{%- if cookiecutter.keras_package == "keras3" %}

import re
import threading
import time

import keras
import pytest
import tensorflow as tf
{%- else %}

import re
import threading
import time

import pytest
import tensorflow as tf
import tf_keras as keras
{%- endif %}
from conftest import REPLICAS, build_model_with_random_layers, check_lines, parsing_also

from {{ cookiecutter.package_name }}.checks import doctor, gpu_smoke, probe
from {{ cookiecutter.package_name }}.config import TrainConfig
from {{ cookiecutter.package_name }}.data import pipeline
{%- if cookiecutter.training_loop in ("custom", "both") %}
from {{ cookiecutter.package_name }}.data.pipeline import worker_batches
{%- endif %}
from {{ cookiecutter.package_name }}.distribute.compat import tf_variable, variable_path
from {{ cookiecutter.package_name }}.distribute.strategy import mirrored_strategy
from {{ cookiecutter.package_name }}.task import build_model, per_example_loss
from {{ cookiecutter.package_name }}.training import (
    assembly,
{%- if cookiecutter.training_loop in ("custom", "both") %}
    engine_custom,
{%- endif %}
{%- if cookiecutter.training_loop in ("fit", "both") and cookiecutter.keras_package == "keras3" %}
    engine_fit,
{%- endif %}
)
{%- if cookiecutter.training_loop in ("custom", "both") %}
from {{ cookiecutter.package_name }}.training.engine_custom import TrainingState
{%- endif %}
from {{ cookiecutter.package_name }}.training.evaluation import make_metric
from {{ cookiecutter.package_name }}.training.optimizer import make_optimizer
{%- else %}

from conftest import check_lines
{%- endif %}
{%- if cookiecutter.distribution == "mirrored" %}
{%- if cookiecutter.training_loop == "both" %}


def named(check, loop):
    return f"{check} ({loop})"


def doctor_on(loop, config, monkeypatch):
    """The doctor's checks of one loop: where each test plants its fault."""
    monkeypatch.setattr(doctor, "LOOPS", (loop,))
    return doctor.doctor(config)
{%- else %}


def named(check, loop):
    return check


def doctor_on(loop, config, monkeypatch):
    return doctor.doctor(config)
{%- endif %}


@pytest.fixture
def config({% if cookiecutter.data_source == "tfrecord" %}data_dir{% endif %}):
    """The project's optimizer and precision on 2 replicas, on small batches (the
    faults below show at any batch size)."""
    return TrainConfig(
        cpu_replicas=REPLICAS,
        per_replica_batch_size=16,
{%- if cookiecutter.data_source == "tfrecord" %}
        data_dir=str(data_dir),
{%- endif %}
    )


def failures(report):
    return {result.name: result.detail for result in report.results if not result.passed}


{%- endif %}


# The doctor as users run it: a fresh process, its report and its exit status.
def test_doctor_passes_on_the_generated_code(cli{% if cookiecutter.data_source == "tfrecord" %}, data_dir{% endif %}):
    result = cli("doctor", {% if cookiecutter.data_source == "tfrecord" %}"--data-dir", str(data_dir), {% endif %}"--per-replica-batch-size", "16")
    assert result.returncode == 0, result.stdout + result.stderr
    checks_run = check_lines(result.stdout)
    assert all(passed for passed, _ in checks_run.values()), result.stdout
{%- if cookiecutter.distribution == "mirrored" %}
{%- if cookiecutter.training_loop == "both" %}
    per_loop = [
        named(check, loop)
        for loop in ("fit", "custom")
        for check in ("variables", "batch-split", "sync")
    ]
    assert list(checks_run) == ["replicas", "dataset", *per_loop, "upstream", "input"]
{%- else %}
    names = ["replicas", "dataset", "variables", "batch-split", "sync", "upstream", "input"]
    assert list(checks_run) == names
{%- endif %}
    assert checks_run["replicas"][1].startswith(f"{REPLICAS} replicas")
    sync = named("sync", "{{ "custom" if cookiecutter.training_loop == "custom" else "fit" }}")
    assert f"on {REPLICAS} replicas vs one device" in checks_run[sync][1]
{%- else %}
    assert checks_run["replicas"][1] == "1 replicas on 1 worker(s)"
    assert checks_run["network"][1] == "one worker: no peer to reach"
{%- endif %}


def test_doctor_command_fails_when_a_check_fails(cli{% if cookiecutter.data_source == "tfrecord" %}, data_dir{% endif %}):
    # More than the data holds: the dataset check fails, and so does the command.
    failing = cli("doctor", {% if cookiecutter.data_source == "tfrecord" %}"--data-dir", str(data_dir), {% endif %}"--per-replica-batch-size", "100000")
    assert failing.returncode == 1
    passed, detail = check_lines(failing.stdout)["dataset"]
    assert not passed and "fewer than one global batch" in detail


{%- if cookiecutter.distribution == "mirrored" %}


# One batch at a time: the parser runs batches in parallel, so a plain sleep would
# give a rate that grows with the pipeline's parallelism.
ONE_BATCH_AT_A_TIME = threading.Lock()


def half_a_second_later(features, labels):
    def pause():
        with ONE_BATCH_AT_A_TIME:
            time.sleep(0.5)
        return 0.0

    delay = tf.py_function(pause, [], tf.float32)
    delay.set_shape([])
    return features, labels + tf.cast(delay, labels.dtype)


def with_per_replica_batch_norm(build_model):
    """The model `build_model` builds, with a BatchNormalization of per-replica
    statistics on its output (any model: a user's own, a backbone's)."""

    def build(statistics):
        model = build_model(statistics)
        normalized = keras.layers.BatchNormalization(synchronized=False)(model.outputs[0])
        return keras.Model(model.inputs, normalized)

    return build


def test_batch_normalization_with_per_replica_statistics_fails_sync(config, monkeypatch):
    loop = "{{ "custom" if cookiecutter.training_loop == "custom" else "fit" }}"
    builder = f"{{ cookiecutter.package_name }}.training.engine_{loop}.build_model"
    monkeypatch.setattr(builder, with_per_replica_batch_norm(build_model))
    failed = failures(doctor_on(loop, config, monkeypatch))[named("sync", loop)]
    assert "statistics over each replica's share of the batch" in failed
    assert "build every one with BatchNormalization(synchronized=True)" in failed


def test_an_input_bound_pipeline_gives_a_warning_with_both_figures(
    config, two_replicas, monkeypatch
):
    # Half a second per batch, one batch at a time: 32 examples/s, far below the
    # step's rate even on a busy machine (the image step measured 260 examples/s
    # beside the other test worker); few batches keep it short.
    slow = parsing_also(assembly.load_sources, half_a_second_later)
    monkeypatch.setattr(assembly, "load_sources", slow)
    monkeypatch.setattr(doctor, "INPUT_STEPS", 2)
    _, plan = doctor.check_dataset(config, two_replicas)
    with pytest.raises(doctor.CheckWarning) as warning:
        doctor.check_input(two_replicas, config, plan)
    assert str(warning.value).startswith("input pipeline "), warning.value
    assert "examples/s, training step " in str(warning.value)
    assert "training is input-bound" in str(warning.value)


def test_a_model_with_random_layers_passes_sync(config, two_replicas, monkeypatch):
    loop = "{{ "custom" if cookiecutter.training_loop == "custom" else "fit" }}"
    builder = f"{{ cookiecutter.package_name }}.training.engine_{loop}.build_model"
    monkeypatch.setattr(builder, build_model_with_random_layers)
    _, plan = doctor.check_dataset(config, two_replicas)
    steps = doctor.SYNC_STEPS
    detail, _ = probe.compare_with_one_device(two_replicas, config, plan, steps)
    assert f"on {REPLICAS} replicas vs one device" in detail
    # The two added, and any of the project's own model.
    switched = re.search(r"\((\d+) random layer\(s\) in inference mode on both sides", detail)
    assert switched and int(switched[1]) >= 2, detail


def apart_after(run_steps, share, nudged):
    """run_steps, after which the second replica's copy of the first trainable
    variable is `share` of its values off the first's (its name appended to
    `nudged`)."""

    def run(strategy, *args, **kwargs):
        run = run_steps(strategy, *args, **kwargs)
        if strategy.num_replicas_in_sync > 1:
            variable = run.model.trainable_variables[0]
            copies = strategy.experimental_local_results(tf_variable(variable))
            copies[1].assign(copies[1] * (1 + share) + 1e-9)
            nudged.append(variable_path(variable))
        return run

    return run


@pytest.mark.parametrize(
    "share, outcome, expected, fix",
    [
        # A few last bits: what a non-deterministic update kernel leaves, such
        # as an Embedding's sparse update.
        (3e-7, doctor.CheckWarning, "drifted apart by up to ", "--deterministic rules the drift"),
        # A hundredth of the values: each replica wrote its own copy.
        (1e-2, doctor.CheckFailed, "differ by more than 0.0001 of", "writes its own copy"),
    ],
    ids=["rounded apart", "written apart"],
)
def test_copies_apart_warn_of_the_kernels_or_fail_not_as_a_scope_error(
    config, two_replicas, monkeypatch, share, outcome, expected, fix
):
    # The first variable: one of several of its short name (`kernel`), which
    # the line must still tell apart.
    _, plan = doctor.check_dataset(config, two_replicas)
    nudged = []
    monkeypatch.setattr(probe, "run_steps", apart_after(probe.run_steps, share, nudged))
    with pytest.raises(outcome) as raised:
        probe.compare_with_one_device(two_replicas, config, plan, doctor.SYNC_STEPS)
    found = str(raised.value)
    assert f"replica copies of {nudged[0]} {expected}" in found, found
    assert fix in found and "outside strategy.scope()" not in found


def one_replica(cpu_replicas=None):
    return mirrored_strategy(["/cpu:0"])


def test_one_replica_when_two_were_asked_fails_replicas(config, monkeypatch):
    monkeypatch.setattr(gpu_smoke, "make_local_strategy", one_replica)
    failed = failures(doctor.doctor(config))
    assert failed["replicas"].startswith("1 replica(s) on ")
    assert f"expected {REPLICAS}" in failed["replicas"]


def batches_with_a_short_last_batch(records, per_replica_batch_size):
    return records.batch(per_replica_batch_size)


def test_a_possibly_empty_replica_batch_fails_dataset(config, monkeypatch):
    monkeypatch.setattr(pipeline, "batch_records", batches_with_a_short_last_batch)
    failed = failures(doctor.doctor(config))
    assert "batch dimension of None" in failed["dataset"]
    assert "drop_remainder=True" in failed["dataset"]
    sync = named("sync", "{{ "custom" if cookiecutter.training_loop == "custom" else "fit" }}")
    assert failed[sync] == "not run: the dataset check failed"
{%- if cookiecutter.training_loop in ("fit", "both") %}


def compile_under(strategy, model, optimizer):
    with strategy.scope():
        model.compile(
            optimizer=optimizer,
            loss=per_example_loss,
            metrics=[make_metric()],
        )
    return model


def fit_model_built_outside_the_scope(strategy, config, statistics, learning_rate):
    model = build_model(statistics)
    with strategy.scope():
        optimizer = make_optimizer(config, learning_rate, model)
    return compile_under(strategy, model, optimizer)


def fit_optimizer_created_outside_the_scope(strategy, config, statistics, learning_rate):
    with strategy.scope():
        model = build_model(statistics)
    optimizer = make_optimizer(config, learning_rate, model)
    return compile_under(strategy, model, optimizer)


@pytest.mark.parametrize(
    "broken_builder, expected",
    [
{%- if cookiecutter.keras_package == "keras3" %}
        # Keras 3 refuses both, loudly; the doctor says what to do.
        (fit_model_built_outside_the_scope, "ValueError: `colocate_vars_with` must only be"),
        (fit_optimizer_created_outside_the_scope, "RuntimeError: Mixing different tf.distribute"),
{%- else %}
        (fit_model_built_outside_the_scope, "ValueError: Variable ("),
        # Silent in training (tf_keras): only the doctor notices.
        (fit_optimizer_created_outside_the_scope, "not distributed (optimizer iteration"),
{%- endif %}
    ],
    ids=["model-outside-scope", "optimizer-outside-scope"],
)
def test_fit_built_outside_the_scope_fails_variables(config, monkeypatch, broken_builder, expected):
    monkeypatch.setattr(assembly, "build_compiled_model", broken_builder)
    detail = failures(doctor_on("fit", config, monkeypatch))[named("variables", "fit")]
    assert detail.startswith(expected) or f" {expected}" in detail
    assert "inside `with strategy.scope():`" in detail
{%- if cookiecutter.keras_package == "keras3" %}


def clipping_optimizer(config, learning_rate, model):
    return keras.optimizers.SGD(learning_rate=learning_rate, clipnorm=1.0)


def test_gradient_clipping_on_keras3_fails_upstream(config, monkeypatch):
    monkeypatch.setattr(engine_fit, "make_optimizer", clipping_optimizer)
    failed = failures(doctor_on("fit", config, monkeypatch))
    assert "clipnorm clips each replica's gradient" in failed["upstream"]
{%- endif %}
{%- endif %}
{%- if cookiecutter.training_loop in ("custom", "both") %}


def state_from(model, optimizer, strategy):
    with strategy.scope():
        metric = make_metric()
    return TrainingState(model, optimizer, metric)


def custom_model_built_outside_the_scope(strategy, config, statistics, learning_rate):
    model = build_model(statistics)
    with strategy.scope():
        optimizer = make_optimizer(config, learning_rate, model)
        optimizer.build(model.trainable_variables)
    return state_from(model, optimizer, strategy)


def custom_optimizer_created_and_built_outside_the_scope(
    strategy, config, statistics, learning_rate
):
    with strategy.scope():
        model = build_model(statistics)
    # The silent case (Keras 3 and tf_keras alike): no error, slots not mirrored.
    optimizer = make_optimizer(config, learning_rate, model)
    optimizer.build(model.trainable_variables)
    return state_from(model, optimizer, strategy)


@pytest.mark.parametrize(
    "broken_builder, expected",
    [
        # Loud (TensorFlow refuses to colocate slots with a plain variable).
        (custom_model_built_outside_the_scope, "strategy.scope()"),
        # Silent in training: only the doctor notices.
        (custom_optimizer_created_and_built_outside_the_scope, "not distributed (optimizer "),
    ],
    ids=["model-outside-scope", "optimizer-outside-scope"],
)
def test_custom_loop_state_built_outside_the_scope_fails_variables(
    config, monkeypatch, broken_builder, expected
):
{%- if cookiecutter.mixed_precision != "no" %}
    config.mixed_precision = False  # the broken builders build for float32
{%- endif %}
    monkeypatch.setattr(assembly, "build_training_state", broken_builder)
    failed = failures(doctor_on("custom", config, monkeypatch))
    detail = failed[named("variables", "custom")]
    assert expected in detail
    assert "inside `with strategy.scope():`" in detail


def undistributed_batches(strategy, plan, seed):
    """Whole global batches, not split across the replicas."""
    return iter(worker_batches(probe.on_one_device(plan), seed, epoch=0, first_step=0))


def replica_loss_averaged_over_the_local_batch(
    model, labels, logits, global_batch_size, accumulate_steps
):
    loss = tf.reduce_mean(per_example_loss(labels, logits))
    if model.losses:
        loss += tf.nn.scale_regularization_loss(tf.add_n(model.losses)) / accumulate_steps
    return loss


def test_dataset_not_distributed_fails_batch_split_and_sync(config, monkeypatch):
    monkeypatch.setattr(probe, "first_batches", undistributed_batches)
    failed = failures(doctor_on("custom", config, monkeypatch))
    assert "the dataset is not distributed" in failed[named("batch-split", "custom")]
    assert "the dataset is not distributed" in failed[named("sync", "custom")]


def test_loss_averaged_over_the_local_batch_fails_sync(config, monkeypatch):
    monkeypatch.setattr(engine_custom, "replica_loss", replica_loss_averaged_over_the_local_batch)
    failed = failures(doctor_on("custom", config, monkeypatch))
    # The data is split correctly: only the loss scaling is wrong.
    assert named("batch-split", "custom") not in failed
    assert "averaged over the local batch" in failed[named("sync", "custom")]


def test_loss_reduced_with_mean_fails_sync(config, monkeypatch):
    monkeypatch.setattr(engine_custom, "SUM", tf.distribute.ReduceOp.MEAN)
    failed = failures(doctor_on("custom", config, monkeypatch))
    assert "reduced with MEAN" in failed[named("sync", "custom")]
    assert f"1/{REPLICAS} of one device's" in failed[named("sync", "custom")]
{%- endif %}
{%- endif %}
