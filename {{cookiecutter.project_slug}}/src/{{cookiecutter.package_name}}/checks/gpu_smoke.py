{%- set mixed_dtype = "bfloat16" if cookiecutter.mixed_precision == "bfloat16" else "float16" %}
{%- set mixed_policy = "mixed_" ~ mixed_dtype -%}
"""`gpu-smoke`: is this machine's set-up sound? Its GPUs, their all-reduce,
and one training step on several replicas against one device, on synthetic
data, so it needs nothing else. With --cpu-replicas, all but the GPU checks on
logical CPUs.
"""
{%- if cookiecutter.mixed_precision != "no" %}

import dataclasses
{%- endif %}

import numpy as np
import tensorflow as tf

from {{ cookiecutter.package_name }}.checks.probe import compare_with_one_device, run_steps
from {{ cookiecutter.package_name }}.checks.report import CheckFailed, Report
from {{ cookiecutter.package_name }}.data.pipeline import ArraySource, make_plan
from {{ cookiecutter.package_name }}.distribute.compat import keras
from {{ cookiecutter.package_name }}.distribute.strategy import local_replicas, make_local_strategy
from {{ cookiecutter.package_name }}.task import sample_examples

SUM = tf.distribute.ReduceOp.SUM
# The mixed precision policy the last check runs one step under{% if cookiecutter.mixed_precision == "no" %} (a float32
# project's: what a GPU run would turn on first){% endif %}, and what keeps it finite.
MIXED_POLICY = "{{ mixed_policy }}"
MIXED_CHECK = "mixed-{{ mixed_dtype }}"
MIXED_FIX = "keep the output layer in float32{% if cookiecutter.mixed_precision != "bfloat16" %} and use a LossScaleOptimizer{% endif %}"
# Global batches of synthetic data: the step checks run on the first.
BATCHES = 4

# What to do when the checked code crashes in a check.
CRASH_FIXES = {
    "gpu-visible": "check the TensorFlow GPU install (pip install '.[gpu]')",
    "replicas": "check CUDA_VISIBLE_DEVICES and the TensorFlow GPU install (pip install '.[gpu]')",
    "all-reduce": "check the GPU driver and NCCL install",
    "step": "run `train` on this machine to see the full traceback",
    "placement": "check CUDA_VISIBLE_DEVICES",
{%- if cookiecutter.mixed_precision == "bfloat16" %}
    "mixed-bfloat16": (
        "compute the loss in float32 (see task.py) and check that the GPU supports"
        " bfloat16 (compute capability 8.0 or newer)"
    ),
{%- else %}
    "mixed-float16": (
        "compute the loss in float32 (see task.py) and check that the GPU supports"
        " float16 (compute capability 7.0 or newer)"
    ),
{%- endif %}
}


def gpu_smoke(config, cpu_replicas=None):
    """The machine checks; with `cpu_replicas`, all but GPU placement on logical CPUs."""
    report = Report(CRASH_FIXES)
    if cpu_replicas is None and report.run("gpu-visible", check_gpu_visible) is None:
        return report
    strategy = report.run("replicas", check_local_replicas, cpu_replicas)
    if strategy is None:
        return report
    report.run("all-reduce", check_all_reduce, strategy)
    plan = synthetic_plan(config.per_replica_batch_size, strategy.num_replicas_in_sync)
    report.run("step", compare_with_one_device, strategy, config, plan, 1)
    if cpu_replicas is None:
        report.run("placement", check_placement, strategy)
    report.run(MIXED_CHECK, check_mixed_step, strategy, config, plan)
    return report


# The checks, in the order gpu_smoke runs them. Each returns (detail, value) or
# raises CheckFailed.


def check_gpu_visible():
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        raise CheckFailed(
            "no GPU visible - check nvidia-smi, CUDA_VISIBLE_DEVICES and the TensorFlow"
            " GPU install (pip install '.[gpu]'); `gpu-smoke --cpu-replicas 2` runs the"
            " other checks on CPUs"
        )
    return f"{len(gpus)} GPU(s): {', '.join(gpu.name for gpu in gpus)}", gpus


def check_local_replicas(cpu_replicas):
    expected = local_replicas(cpu_replicas)
    strategy = make_local_strategy(cpu_replicas)
    devices = ", ".join(strategy.extended.worker_devices)
    if strategy.num_replicas_in_sync != expected:
        raise CheckFailed(
            f"{strategy.num_replicas_in_sync} replica(s) on {devices}, expected {expected}:"
            " the other devices would sit idle - create the strategy with make_strategy()"
            " and check CUDA_VISIBLE_DEVICES"
        )
    return f"{expected} replicas on {devices}", strategy


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


def synthetic_plan(per_replica_batch_size, replicas):
    """A few global batches of the task's sample, in memory."""
    examples = ArraySource(*sample_examples(BATCHES * per_replica_batch_size * replicas, seed=0))
    return make_plan(examples, examples, per_replica_batch_size, replicas)


def check_mixed_step(strategy, config, plan):
    """One step under MIXED_POLICY: half-precision compute, float32 weights, finite values."""
    try:
        run = run_steps(strategy, mixed_precision_config(config), plan, 1)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    weights = run.model.get_weights()
    if not np.isfinite(run.loss) or not all(np.isfinite(weight).all() for weight in weights):
        raise CheckFailed(
            f"one {MIXED_POLICY} step gave loss {run.loss} or non-finite weights - {MIXED_FIX}"
        )
    return f"one {MIXED_POLICY} step: loss {run.loss:.4f}, weights finite", True
{% include "checks/gpu_smoke/" ~ cookiecutter.mixed_precision ~ ".py" %}