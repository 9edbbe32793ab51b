{%- set mixed_dtype = "bfloat16" if cookiecutter.mixed_precision == "bfloat16" else "float16" %}
{%- set mixed_policy = "mixed_" ~ mixed_dtype -%}
"""Checks that distribution really happens, run on a few batches.

`doctor` checks your training code: it calls the very functions `train` uses
(model builder, optimizer factory, data pipeline, {% if cookiecutter.training_loop == "fit" %}compiled model{% elif cookiecutter.training_loop == "custom" %}replica step{% else %}compiled model, replica step{% endif %}),
so an edit that breaks synchronisation without any error shows up here, before
it costs days of GPU time.
`gpu-smoke` checks a machine: its GPUs, their all-reduce and one training step.

Each check gives one line: `PASS <check>: <detail>` or `FAIL <check>: <reason> - <fix>`;
the `input` check gives `WARN` (it still passes) when training waits for data.
"""

import dataclasses
import time

import numpy as np
import tensorflow as tf

from {{ cookiecutter.package_name }} import TrainerError, first_line
from {{ cookiecutter.package_name }}.compat import is_distributed, keras, replica_copies
from {{ cookiecutter.package_name }}.data import (
    ArraySource,
    data_sharding,
    make_plan,
    plan_run,
    synthetic_examples,
    training_input,
    worker_batches,
)
{%- if cookiecutter.training_loop in ("custom", "both") %}
from {{ cookiecutter.package_name }}.engine_custom import CustomEngine, build_training_state
{%- endif %}
{%- if cookiecutter.training_loop in ("fit", "both") %}
from {{ cookiecutter.package_name }}.engine_fit import FitEngine, build_compiled_model
{%- endif %}
{%- if cookiecutter.mixed_precision != "no" %}
from {{ cookiecutter.package_name }}.model import set_precision_policy
{%- endif %}
from {{ cookiecutter.package_name }}.strategy import (
{%- if cookiecutter.keras_package == "keras3" %}
    check_keras_version,
{%- endif %}
    local_replicas,
{%- if cookiecutter.distribution == "mirrored" %}
    make_strategy,
{%- else %}
    make_local_strategy,
    make_strategy,
{%- endif %}
    mirrored_strategy,
{%- if cookiecutter.distribution == "multi_worker" %}
    worker_count,
{%- endif %}
)
from {{ cookiecutter.package_name }}.training import build_engine, set_global_seed

SUM = tf.distribute.ReduceOp.SUM
{%- if cookiecutter.training_loop == "both" %}

LOOPS = ("fit", "custom")
{%- endif %}
{%- if cookiecutter.distribution == "mirrored" %}
# With no GPU, the doctor splits the CPU: one replica could not show a sync error.
DOCTOR_CPU_REPLICAS = 2
{%- endif %}
SYNC_STEPS = 4
# Steps (and their batches) the input check times.
INPUT_STEPS = 16
# Plain SGD at a fixed rate (Adam hides scaling errors): a scaling error moves
# the weights by ~1e-2 in SYNC_STEPS steps, float rounding by ~1e-7.
{%- if cookiecutter.task == "image" %}
# (At 0.05, batch normalization amplifies float rounding about 3x per step.)
SYNC_LEARNING_RATE = 0.01
{%- else %}
SYNC_LEARNING_RATE = 0.05
{%- endif %}
WEIGHT_TOLERANCE = 1e-5
LOSS_TOLERANCE = 1e-5

# What to do when a check crashes inside the checked code.
CRASH_FIXES = {
    "replicas": "check CUDA_VISIBLE_DEVICES and the TensorFlow GPU install (pip install '.[gpu]')",
    "dataset": "check load_sources and worker_batches in data.py",
    "input": "check worker_batches in data.py",
    "variables": (
        "build the model, the optimizer (with optimizer.build) and the metrics inside"
        " `with strategy.scope():`"
    ),
    "batch-split": "check that the replica step runs through strategy.run",
    "sync": "run `train` with the same flags to see the full traceback",
    "upstream": "run `train` with the same flags to see the full traceback",
    "gpu-visible": "check the TensorFlow GPU install (pip install '.[gpu]')",
    "all-reduce": "check the GPU driver and NCCL install",
    "step": "run `train` on this machine to see the full traceback",
    "placement": "check CUDA_VISIBLE_DEVICES",
{%- if cookiecutter.mixed_precision == "bfloat16" %}
    "mixed-bfloat16": (
        "compute the loss in float32 (see model.py) and check that the GPU supports"
        " bfloat16 (compute capability 8.0 or newer)"
    ),
{%- else %}
    "mixed-float16": (
        "compute the loss in float32 (see model.py) and check that the GPU supports"
        " float16 (compute capability 7.0 or newer)"
    ),
{%- endif %}
}


@dataclasses.dataclass
class CheckResult:
    name: str
    passed: bool
    detail: str
    # Passed, but something costs speed (not correctness): WARN.
    warning: bool = False

    def __str__(self):
        status = "FAIL" if not self.passed else "WARN" if self.warning else "PASS"
        return f"{status} {self.name}: {self.detail}"


class CheckFailed(Exception):
    """A failed check; the message reads `<reason> - <fix>`."""


class CheckWarning(Exception):
    """A check that passed with a warning; the message reads `<finding> - <fix>`."""


class Report:
    """The results of a series of checks, in the order they ran."""

    def __init__(self):
        self.results = []

    @property
    def passed(self):
        return bool(self.results) and all(result.passed for result in self.results)

    def run(self, name, check, *args):
        """Run `check(*args) -> (detail, value)`; return the value, or None if it failed."""
        outcome = self.attempt(name, check, *args)
        if outcome is None:
            return None
        detail, value = outcome
        self.add(name, True, detail)
        return value

    def attempt(self, name, function, *args):
        """Return `function(*args)`; on an error, record a failed `name` and return None."""
        try:
            return function(*args)
        except CheckWarning as err:
            self.add(name, True, str(err), warning=True)
        except (CheckFailed, TrainerError) as err:  # messages that already say what to do
            self.add(name, False, str(err))
        except Exception as err:  # a crash in the checked code is a failed check
            fix = CRASH_FIXES[name.split()[0]]
            self.add(name, False, f"{type(err).__name__}: {first_line(err)} - {fix}")
        return None

    def not_run(self, name, reason):
        self.add(name, False, f"not run: {reason}")

    def add(self, name, passed, detail, warning=False):
        self.results.append(CheckResult(name, passed, " ".join(detail.split()), warning))

    def print(self):
        for result in self.results:
            print(result, flush=True)


def record_batch_size(features, batch_sizes):
    """Add the batch size of `features`, seen inside a replica step, to `batch_sizes`."""
    size = features.shape[0]
    if size is not None:
        batch_sizes.add(size)
    else:  # not known when traced (multi-worker input): read it when the step runs
        tf.py_function(lambda runtime: batch_sizes.add(int(runtime)), [tf.shape(features)[0]], [])


class BatchProbe:
    """Stands in for the model inside the replica step and records the batch
    size each replica's call sees."""

    def __init__(self, model):
        self.model = model
        self.batch_sizes = set()

    def __call__(self, features, *args, **kwargs):
        record_batch_size(features, self.batch_sizes)
        return self.model(features, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.model, name)


@dataclasses.dataclass
class ProbeRun:
    """What a few training steps with the project's own code left behind."""

    model: keras.Model
    optimizer: keras.optimizers.Optimizer
    metrics: list
    # The reported training loss: the mean over the steps.
    loss: float
    # Batch sizes seen inside the replica step.
    batch_sizes: set

    def variables(self):
        """(owner, variable) for every model, optimizer and metric variable."""
        found, seen = [], set()
        groups = [("model", self.model.weights), ("optimizer", self.optimizer.variables)]
        groups += [("metric", metric.variables) for metric in self.metrics]
        for owner, variables in groups:
            for variable in variables:
                if id(variable) not in seen:
                    seen.add(id(variable))
                    found.append((owner, variable))
        return found

    def synchronized_variables(self):
        """Model and optimizer variables: their replica copies must be identical
        (metric variables are summed on read, so their copies differ)."""
        return [variable for owner, variable in self.variables() if owner != "metric"]
{%- if cookiecutter.training_loop in ("fit", "both") %}


def run_fit_steps(strategy, config, plan, steps, noise=True):
    """`steps` steps of the fit engine on the model from build_compiled_model
    (with its dropout and noise layers off unless `noise`)."""
    set_global_seed(config.seed)
    model = build_compiled_model(strategy, config)
    if not noise:
        switch_off_noise(model)
    batch_sizes = set()
    train_step = model.train_step

    def probed_train_step(data):
        record_batch_size(tf.nest.flatten(data)[0], batch_sizes)
        return train_step(data)

    # The engine calls train_step inside strategy.run: it sees one replica's batch.
    model.train_step = probed_train_step
    engine = FitEngine(strategy, model, steps)
    loss, _ = engine.train(first_batches(strategy, plan, config.seed), tf.constant(steps))
    return ProbeRun(model, model.optimizer, model.metrics, float(loss), batch_sizes)
{%- endif %}
{%- if cookiecutter.training_loop in ("custom", "both") %}


def run_custom_steps(strategy, config, plan, steps, noise=True):
    """`steps` steps of the custom engine's train function (with the model's
    dropout and noise layers off unless `noise`)."""
    set_global_seed(config.seed)
    state = build_training_state(strategy, config)
    if not noise:
        switch_off_noise(state.model)
    probe = BatchProbe(state.model)
    engine = CustomEngine(
        strategy,
        dataclasses.replace(state, model=probe),
        plan.global_batch_size,
        steps,
{%- if cookiecutter.task == "tabular" %}
        config.jit_compile,
{%- endif %}
    )
    loss, _ = engine.train(first_batches(strategy, plan, config.seed), tf.constant(steps))
    return ProbeRun(state.model, state.optimizer, [state.metric], float(loss), probe.batch_sizes)
{%- endif %}


def first_batches(strategy, plan, seed):
    """The distributed batches of epoch 0, as `train` reads them."""
    return iter(training_input(strategy, plan, seed, epoch=0))


def run_steps({% if cookiecutter.training_loop == "both" %}loop, {% endif %}strategy, config, plan, steps, noise=True):
{%- if cookiecutter.mixed_precision != "no" %}
    set_precision_policy(config.mixed_precision)
{%- endif %}
{%- if cookiecutter.training_loop == "both" %}
    if loop == "fit":
        return run_fit_steps(strategy, config, plan, steps, noise)
    return run_custom_steps(strategy, config, plan, steps, noise)
{%- elif cookiecutter.training_loop == "fit" %}
    return run_fit_steps(strategy, config, plan, steps, noise)
{%- else %}
    return run_custom_steps(strategy, config, plan, steps, noise)
{%- endif %}


# Dropout and noise layers, and the setting that says how much noise each adds.
NOISE_SETTINGS = (
    (keras.layers.Dropout, "rate"),  # SpatialDropout1D/2D/3D too
    (keras.layers.GaussianDropout, "rate"),
    (keras.layers.AlphaDropout, "rate"),
    (keras.layers.GaussianNoise, "stddev"),
)


def noise_layers(model):
    """(layer, setting) for each of the model's dropout and noise layers."""
    return [
        (layer, setting)
        for layer in model._flatten_layers()
        for kind, setting in NOISE_SETTINGS
        if isinstance(layer, kind)
    ]


def switch_off_noise(model):
    """Make the model's dropout and noise layers add none. They draw their own
    random numbers on each replica (compat.per_replica_randomness), as one device
    draws its own for each example, so N replicas and one device agree only
    without them."""
    for layer, setting in noise_layers(model):
        setattr(layer, setting, 0.0)


def sgd_config(config):
    """The run's config with plain SGD under the float32 policy, for comparisons."""
    return dataclasses.replace(
        config,
        optimizer="sgd",
        learning_rate=SYNC_LEARNING_RATE,
{%- if cookiecutter.mixed_precision != "no" %}
        mixed_precision=False,
{%- endif %}
    )


def reference_strategy():
    """One device of this machine: what N replicas must reproduce."""
    device = "/gpu:0" if tf.config.list_logical_devices("GPU") else "/cpu:0"
    return mirrored_strategy([device])


def compare_with_one_device({% if cookiecutter.training_loop == "both" %}loop, {% endif %}strategy, config, plan, steps, split_ok=True):
    """`steps` SGD steps on the strategy's replicas vs on one device, same global
    batches: weights and reported loss must agree, replica copies be identical."""
    config = sgd_config(config)
    plan = data_sharded(plan)
    replicas = strategy.num_replicas_in_sync
    # TensorFloat-32 (on by default on Ampere and newer GPUs) rounds matmul inputs to
    # 10 bits: the same math on other batch shapes would differ by far more than 1e-5.
    tf32 = tf.config.experimental.tensor_float_32_execution_enabled()
    tf.config.experimental.enable_tensor_float_32_execution(False)
    try:
        distributed = run_steps({% if cookiecutter.training_loop == "both" %}loop, {% endif %}strategy, config, plan, steps, noise=False)
        single = run_steps({% if cookiecutter.training_loop == "both" %}loop, {% endif %}reference_strategy(), config, plan, steps, noise=False)
    finally:
        tf.config.experimental.enable_tensor_float_32_execution(tf32)
    diverged = [
        variable.name
        for variable in distributed.synchronized_variables()
        if not all_equal(replica_copies(strategy, variable))
    ]
    gap = max(
        float(np.max(np.abs(left - right)))
        for left, right in zip(
            distributed.model.get_weights(), single.model.get_weights(), strict=True
        )
    )
    ratio = distributed.loss / single.loss
    detail = (
        f"{steps} SGD step(s) on {replicas} replicas vs one device: weights differ by"
        f" {gap:.1e}, loss {distributed.loss:.6f} vs {single.loss:.6f}"
    )
    noisy = [layer.name for layer, _ in noise_layers(distributed.model)]
    if noisy:
        detail += (
            f" (dropout and noise off in {', '.join(noisy[:3])}{', ...' if len(noisy) > 3 else ''}:"
            " each replica draws its own random numbers)"
        )
    if gap <= WEIGHT_TOLERANCE and abs(ratio - 1) <= LOSS_TOLERANCE and not diverged:
        if replicas == 1:
            detail += (
                " (1 replica: nothing to compare - use several GPUs, or on a CPU"
                " CUDA_VISIBLE_DEVICES=-1 with --cpu-replicas 2)"
            )
        return detail, True
    cause = likely_cause(ratio, replicas, split_ok, diverged, distributed.model)
    raise CheckFailed(f"{detail}; {cause}")


def data_sharded(plan):
    """The plan with DATA sharding: one device reads what all the workers read
    together only when every worker keeps every W-th record of the same order."""
    shards = data_sharding(
        len(plan.train.counts), plan.shards.num_workers, plan.shards.steps_per_pass
    )
    return dataclasses.replace(plan, shards=shards)


def all_equal(arrays):
    first, *others = arrays
    return all(np.array_equal(first, other) for other in others)


def unsynchronized_batch_norms(model):
    """Names of the model's BatchNormalization layers with per-replica statistics."""
    found = []
    for layer in model.layers:
        if hasattr(layer, "layers"):  # a nested model
            found += unsynchronized_batch_norms(layer)
        elif isinstance(layer, keras.layers.BatchNormalization) and not layer.synchronized:
            found.append(layer.name)
    return found


def likely_cause(loss_ratio, replicas, split_ok, diverged, model):
    """Name the usual mistake behind a mismatch, from its signature."""
    # Per-replica statistics also leave the replicas' moving averages apart.
    batch_norms = unsynchronized_batch_norms(model)
    if replicas > 1 and batch_norms:
        return (
            f"BatchNormalization layer(s) {', '.join(batch_norms[:3])} compute their"
            " statistics over each replica's share of the batch, not the global batch -"
            " build them with BatchNormalization(synchronized=True)"
        )
    if diverged:
        return (
            f"replica copies of {', '.join(diverged[:3])} differ: they were created"
            " outside strategy.scope() - create them inside `with strategy.scope():`"
        )
    if replicas > 1 and abs(loss_ratio * replicas - 1) < 0.01:
        return (
            f"the loss is 1/{replicas} of one device's: it is reduced with MEAN across"
            " replicas - reduce with tf.distribute.ReduceOp.SUM (each replica's loss is"
            " already divided by the global batch)"
        )
    if replicas > 1 and abs(loss_ratio / replicas - 1) < 0.1:
        if not split_ok:
            return (
                f"every replica trains on the whole global batch, so gradients are"
                f" {replicas}x too large: the dataset is not distributed - build it"
                " with strategy.distribute_datasets_from_function() (data.training_input)"
            )
        return (
            f"gradients are {replicas}x too large: the loss is averaged over the local"
            " batch, not scaled by the global batch - use tf.nn.compute_average_loss("
            "per_example_loss, global_batch_size=GLOBAL_BATCH) and reduce with SUM"
        )
    return (
        "the replicas do not compute what one device computes - look for anything"
        " done per replica in the step (gradient clipping, a manual all-reduce before"
        " apply_gradients)"
    )


# The doctor's checks. Each returns (detail, value) or raises CheckFailed.


def check_local_replicas(cpu_replicas):
    expected = local_replicas(cpu_replicas)
{%- if cookiecutter.distribution == "mirrored" %}
    strategy = make_strategy(cpu_replicas)
{%- else %}
    strategy = make_local_strategy(cpu_replicas)
{%- endif %}
    devices = ", ".join(strategy.extended.worker_devices)
    if strategy.num_replicas_in_sync != expected:
        raise CheckFailed(
            f"{strategy.num_replicas_in_sync} replica(s) on {devices}, expected {expected}:"
            " the other devices would sit idle - create the strategy with make_strategy()"
            " and check CUDA_VISIBLE_DEVICES"
        )
    return f"{expected} replicas on {devices}", strategy
{%- if cookiecutter.distribution == "multi_worker" %}


def check_cluster_replicas():
    strategy = make_strategy()
    workers = worker_count(strategy)
    expected = workers * local_replicas()
    found = strategy.num_replicas_in_sync
    if found != expected:
        raise CheckFailed(
            f"{found} replica(s), expected {expected} ({workers} worker(s) x"
            f" {local_replicas()} device(s)) - check TF_CONFIG and CUDA_VISIBLE_DEVICES"
        )
    return f"{found} replicas on {workers} worker(s)", strategy
{%- endif %}


def check_dataset(config, strategy):
    plan = plan_run(config, strategy)  # the counts: at least one global batch per pass
    replicas = strategy.num_replicas_in_sync
    per_replica = plan.global_batch_size // replicas
    workers = plan.shards.num_workers
    batches = worker_batches(plan, config.seed, 0, 0, 0, workers, per_replica)
    batch_dimension = tf.nest.flatten(batches.element_spec)[0].shape[0]
    if batch_dimension != per_replica:
        raise CheckFailed(
            f"a replica's batches have a batch dimension of {batch_dimension}, not"
            f" {per_replica} (global batch {plan.global_batch_size} / {replicas} replicas):"
            " a short batch can leave a replica with no examples - batch with the"
            " per-replica batch size and drop_remainder=True (data.batch_records)"
        )
    first = next(iter(training_input(strategy, plan, config.seed, epoch=0)))
    features = tf.nest.flatten(first)[0]
    sizes = [int(part.shape[0]) for part in strategy.experimental_local_results(features)]
    detail = (
        f"{plan.steps_per_epoch} steps per epoch of global batch {plan.global_batch_size},"
{%- if cookiecutter.distribution == "mirrored" %}
        f" split {sizes} across the replicas"
{%- else %}
        f" split {sizes} across this worker's replicas, {plan.shards.policy.name} sharding"
{%- endif %}
    )
    return detail, plan


def check_input(strategy, config, plan):
    """The input pipeline alone against the training step alone, in examples/s
    on one worker: training waits for data when the pipeline is the slower."""
    input_rate = input_examples_per_second(strategy, config, plan)
    step_rate = step_examples_per_second(strategy, config, plan)
    detail = (
        f"input pipeline {input_rate:,.0f} examples/s, training step {step_rate:,.0f}"
        " examples/s per worker"
    )
    if input_rate < step_rate:
        raise CheckWarning(
            f"{detail}: training is input-bound - read more files at once"
            " (READ_PARALLELISM in data.py), keep per-record work out of the parser, or"
            " move the data closer to the machines"
        )
    return f"{detail} ({input_rate / step_rate:.1f}x what the step needs)", True


def streaming(plan, steps):
    """The plan with `steps` steps per epoch: the stream runs on across passes."""
    return dataclasses.replace(plan, steps_per_epoch=steps)


def input_examples_per_second(strategy, config, plan):
    """Worker 0's pipeline (every worker's does the same work), after its first
    batch (the shuffle buffer's fill is start-up, not throughput)."""
    per_replica = plan.global_batch_size // strategy.num_replicas_in_sync
    workers = plan.shards.num_workers
    batches = INPUT_STEPS * plan.global_batch_size // workers // per_replica
    dataset = worker_batches(
        streaming(plan, INPUT_STEPS + 1), config.seed, 0, 0, 0, workers, per_replica
    )
    iterator = iter(dataset)
    next(iterator)
    started = time.perf_counter()
    for _ in range(batches - 1):
        next(iterator)
    return (batches - 1) * per_replica / (time.perf_counter() - started)


def step_examples_per_second(strategy, config, plan):
    """The training step on batches already in memory: its speed without input."""
{%- if cookiecutter.mixed_precision != "no" %}
    set_precision_policy(config.mixed_precision)
{%- endif %}
    engine = build_engine(config, strategy, plan.global_batch_size)
    steps = INPUT_STEPS

    def cached(context):
        batches = worker_batches(
            streaming(plan, steps),
            config.seed,
            0,
            0,
            context.input_pipeline_id,
            context.num_input_pipelines,
            context.get_per_replica_batch_size(plan.global_batch_size),
        )
        return batches.cache().repeat()

    iterator = iter(strategy.distribute_datasets_from_function(cached))
    float(engine.train(iterator, tf.constant(steps))[0])  # trace, fill the cache
    started = time.perf_counter()
    float(engine.train(iterator, tf.constant(steps))[0])
    workers = plan.shards.num_workers
    return steps * plan.global_batch_size / workers / (time.perf_counter() - started)


def check_variables(run):
    variables = run.variables()
    local = [
        f"{owner} {variable.name}" for owner, variable in variables if not is_distributed(variable)
    ]
    if local:
        raise CheckFailed(
            f"{len(local)} of {len(variables)} variables are not distributed"
            f" ({', '.join(local[:3])}{', ...' if len(local) > 3 else ''}): they were"
            " created outside strategy.scope(), so each replica updates its own copy"
            " - create the model, the optimizer (and call optimizer.build) and the"
            " metrics inside `with strategy.scope():`"
        )
    return f"all {len(variables)} model, optimizer and metric variables are distributed", True


def check_batch_split(run, plan, replicas):
    expected = plan.global_batch_size // replicas
    seen = sorted(run.batch_sizes)
    if seen == [expected]:
        return (
            f"each replica's step sees {expected} examples (global batch"
            f" {plan.global_batch_size} / {replicas} replicas)",
            True,
        )
    if replicas > 1 and seen == [plan.global_batch_size]:
        raise CheckFailed(
            f"each replica's step sees the whole global batch of {plan.global_batch_size},"
            f" not {expected}: the dataset is not distributed - pass it through"
            " strategy.experimental_distribute_dataset()"
        )
    raise CheckFailed(
        f"the replica step sees batches of {seen}, expected {expected} - batch the"
        " dataset with the global batch size and let the strategy split it"
    )


def check_upstream(replicas, runs):
    """Options that are known to be broken upstream (facts, section 3)."""
{%- if cookiecutter.keras_package == "keras3" %}
    check_keras_version()
    problems = []
    for run in runs:
        optimizer = getattr(run.optimizer, "inner_optimizer", run.optimizer)
        clipping = [
            name
            for name in ("clipnorm", "global_clipnorm", "clipvalue")
            if getattr(optimizer, name, None)
        ]
        if clipping and replicas > 1:
            problems.append(
                f"the optimizer's {'/'.join(clipping)} clips each replica's gradient before"
                " the all-reduce in Keras 3, so results differ from one device - clip after"
                " strategy.reduce(SUM) with tf.clip_by_global_norm in a custom loop"
            )
        if getattr(run.model, "jit_compile", False) is True and replicas > 1:
            problems.append(
                "jit_compile=True fails under MirroredStrategy with several replicas"
                " (https://github.com/keras-team/keras/issues/19005) - compile with"
                " jit_compile=False"
            )
    if problems:
        raise CheckFailed("; ".join(dict.fromkeys(problems)))
    return (
        f"keras {keras.__version__}: no option known to be broken upstream"
        " (jit_compile keras#19005, gradient clipping)",
        True,
    )
{%- else %}
    return (
        f"tf_keras {keras.__version__}: no option of this project is known to be broken upstream",
        True,
    )
{%- endif %}


{%- if cookiecutter.distribution == "mirrored" %}


{% if cookiecutter.training_loop == "both" -%}
def doctor(config, loops=LOOPS):
    """Every check of the training code (of `loops`); a Report whose `passed` says
    if all passed."""
{%- else -%}
def doctor(config):
    """Every check of the training code; a Report whose `passed` says if all passed."""
{%- endif %}
    cpu_replicas = config.cpu_replicas
    if cpu_replicas is None and not tf.config.list_physical_devices("GPU"):
        cpu_replicas = DOCTOR_CPU_REPLICAS
    report = Report()
    strategy = report.run("replicas", check_local_replicas, cpu_replicas)
{%- else %}


{% if cookiecutter.training_loop == "both" -%}
def doctor(config, loops=LOOPS):
    """Every check of the training code (of `loops`); a Report whose `passed` says
    if all passed."""
{%- else -%}
def doctor(config):
    """Every check of the training code; a Report whose `passed` says if all passed."""
{%- endif %}
    report = Report()
    strategy = report.run("replicas", check_cluster_replicas)
{%- endif %}
    if strategy is None:
        for name in ("dataset", "variables", "batch-split", "sync", "upstream", "input"):
            report.not_run(name, "no strategy (see the replicas check)")
        return report
    plan = report.run("dataset", check_dataset, config, strategy)
{%- if cookiecutter.training_loop == "both" %}
    runs = [check_training_step(report, loop, strategy, config, plan) for loop in loops]
{%- else %}
    runs = [check_training_step(report, strategy, config, plan)]
{%- endif %}
    runs = [run for run in runs if run is not None]
    report.run("upstream", check_upstream, strategy.num_replicas_in_sync, runs)
    # Speed matters once training is right (and measuring it takes seconds).
    if report.passed:
        report.run("input", check_input, strategy, config, plan)
    else:
        report.not_run("input", "a check above failed")
    return report


def check_training_step(report, {% if cookiecutter.training_loop == "both" %}loop, {% endif %}strategy, config, plan):
    """The variables, batch-split and sync checks{% if cookiecutter.training_loop == "both" %} of one loop{% endif %}; returns the probe run."""
{%- if cookiecutter.training_loop == "both" %}
    variables, batch_split, sync = (
        f"{name} ({loop})" for name in ("variables", "batch-split", "sync")
    )
{%- else %}
    variables, batch_split, sync = "variables", "batch-split", "sync"
{%- endif %}
    if plan is None:
        for name in (variables, batch_split, sync):
            report.not_run(name, "the dataset check failed")
        return None
    # One step with the run's own config (its optimizer, its precision).
    run = report.attempt(variables, run_steps, {% if cookiecutter.training_loop == "both" %}loop, {% endif %}strategy, config, plan, 1)
    if run is None:
        for name in (batch_split, sync):
            report.not_run(name, "the training step failed (see variables)")
        return None
    replicas = strategy.num_replicas_in_sync
    report.run(variables, check_variables, run)
    split_ok = report.run(batch_split, check_batch_split, run, plan, replicas)
    steps = min(SYNC_STEPS, plan.steps_per_epoch)
    report.run(
        sync,
        compare_with_one_device,
{%- if cookiecutter.training_loop == "both" %}
        loop,
{%- endif %}
        strategy,
        config,
        plan,
        steps,
        split_ok is not None,
    )
    return run


# gpu-smoke: is this machine's set-up sound? Synthetic data, so it needs nothing else.


def check_gpu_visible():
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        raise CheckFailed(
            "no GPU visible - check nvidia-smi, CUDA_VISIBLE_DEVICES and the TensorFlow"
            " GPU install (pip install '.[gpu]'); `gpu-smoke --cpu-replicas 2` runs the"
            " other checks on CPUs"
        )
    return f"{len(gpus)} GPU(s): {', '.join(gpu.name for gpu in gpus)}", gpus


def check_all_reduce(strategy):
    """Each replica contributes its id + 1; every replica must get N(N+1)/2."""

    def replica_fn():
        context = tf.distribute.get_replica_context()
        own = tf.cast(context.replica_id_in_sync_group + 1, tf.float32)
        return context.all_reduce(SUM, own)

    results = strategy.run(tf.function(replica_fn))
    values = [float(value) for value in strategy.experimental_local_results(results)]
    replicas = strategy.num_replicas_in_sync
    expected = replicas * (replicas + 1) / 2
    if values != [expected] * replicas:
        raise CheckFailed(
            f"replica-id all-reduce gave {values}, expected {expected} on each of"
            f" {replicas} replicas: the devices do not exchange values - check the GPU"
            " driver and NCCL install"
        )
    return f"replica-id all-reduce gives {expected:g} on each of {replicas} replicas", True


def check_placement(strategy):
    """Replica i's output lives on the strategy's i-th GPU, each on its own."""

    def replica_fn():
        context = tf.distribute.get_replica_context()
        return tf.fill([1], tf.cast(context.replica_id_in_sync_group, tf.float32))

    results = strategy.experimental_local_results(strategy.run(tf.function(replica_fn)))
    placed = [tf.DeviceSpec.from_string(result.device) for result in results]
    wanted = [tf.DeviceSpec.from_string(device) for device in strategy.extended.worker_devices]
    wrong = [
        f"replica {index} on {spec.device_type}:{spec.device_index}"
        for index, (spec, target) in enumerate(zip(placed, wanted, strict=True))
        if spec.device_type != "GPU" or spec.device_index != target.device_index
    ]
    if wrong:
        raise CheckFailed(
            f"{', '.join(wrong)}: replicas do not run on their own GPU - check"
            " CUDA_VISIBLE_DEVICES and that nothing pins ops to a device"
        )
    return f"replica i runs on GPU:i for all {len(results)} replicas", True


def synthetic_plan(global_batch_size, steps=SYNC_STEPS):
    """A few global batches of the synthetic task, in memory."""
    examples = ArraySource(*synthetic_examples(steps * global_batch_size, seed=0))
    return make_plan(examples, examples, global_batch_size)


def check_mixed_step(strategy, config, plan):
    """One {{ mixed_policy }} step: {{ mixed_dtype }} compute, float32 weights, finite values."""
{%- if cookiecutter.mixed_precision != "no" %}
    mixed = dataclasses.replace(config, mixed_precision=True)  # run_steps sets the policy
{%- else %}
    mixed = config
    keras.mixed_precision.set_global_policy("mixed_float16")
{%- endif %}
    try:
        run = run_steps({% if cookiecutter.training_loop == "both" %}"fit", {% endif %}strategy, mixed, plan, 1)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    weights = run.model.get_weights()
    if not np.isfinite(run.loss) or not all(np.isfinite(weight).all() for weight in weights):
        raise CheckFailed(
            f"one {{ mixed_policy }} step gave loss {run.loss} or non-finite weights - keep the"
{%- if cookiecutter.mixed_precision == "bfloat16" %}
            " output layer in float32"
{%- else %}
            " output layer in float32 and use a LossScaleOptimizer"
{%- endif %}
        )
    return f"one {{ mixed_policy }} step: loss {run.loss:.4f}, weights finite", True


def gpu_smoke(config, cpu_replicas=None):
    """The machine checks; with `cpu_replicas`, all but GPU placement on logical CPUs."""
    report = Report()
    if cpu_replicas is None and report.run("gpu-visible", check_gpu_visible) is None:
        return report
    strategy = report.run("replicas", check_local_replicas, cpu_replicas)
    if strategy is None:
        return report
    report.run("all-reduce", check_all_reduce, strategy)
    replicas = strategy.num_replicas_in_sync
    plan = synthetic_plan(config.per_replica_batch_size * replicas)
    report.run("step", compare_with_one_device, {% if cookiecutter.training_loop == "both" %}"fit", {% endif %}strategy, config, plan, 1)
    if cpu_replicas is None:
        report.run("placement", check_placement, strategy)
    report.run("mixed-{{ mixed_dtype }}", check_mixed_step, strategy, config, plan)
    return report
