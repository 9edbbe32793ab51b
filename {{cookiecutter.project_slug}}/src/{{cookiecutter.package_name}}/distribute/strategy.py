"""The one place a tf.distribute strategy is made, checked and described{% if cookiecutter.distribution == "multi_worker" %}:
MultiWorkerMirroredStrategy across the workers of TF_CONFIG, and each worker's
lost peers named{% endif %}."""

import functools
import logging
{%- if cookiecutter.distribution == "multi_worker" %}
import re
import time
{%- endif %}

import tensorflow as tf

from {{ cookiecutter.package_name }} import TrainerError{% if cookiecutter.distribution == "multi_worker" %}, first_line{% endif %}
{%- if cookiecutter.distribution == "multi_worker" %}
from {{ cookiecutter.package_name }}.distribute.cluster import read_tf_config
{%- endif %}
from {{ cookiecutter.package_name }}.distribute.compat import keras_version_problem, version_tuple

log = logging.getLogger(__name__)

# What pyproject.toml pins; the tests and the facts behind this code are for it.
SUPPORTED_TENSORFLOW = ((2, 21), (2, 22))


class StrategyError(TrainerError):
    pass


def check_tensorflow_version(version=None):
    version = version or tf.__version__
    low, high = SUPPORTED_TENSORFLOW
    if not low <= version_tuple(version) < high:
        raise StrategyError(
            f"tensorflow {version} is not supported: this project is written and tested"
            f" for {low[0]}.{low[1]}.x - pip install 'tensorflow>={low[0]}.{low[1]},"
            f"<{high[0]}.{high[1]}'"
        )


def check_keras_version(version=None):
    """The Keras package's version (distribute/compat.py says what it needs)."""
    problem = keras_version_problem(version)
    if problem:
        raise StrategyError(problem)


def check_versions():
    """Refuse, before any strategy, versions under which this code trains wrong silently."""
    check_tensorflow_version()
    check_keras_version()


def mirrored_strategy(devices=None):
    """The process's MirroredStrategy over `devices` (None: every GPU), made once.

    TensorFlow's collective keys restart with every new strategy: two strategies
    over the same devices in one process clash in a collective (gradient
    all-reduce, synchronized batch normalization) with "Shape mismatch in the
    collective instance 100".
    """
    if devices is None:
        return _mirrored_strategy(None)
    specs = [tf.DeviceSpec.from_string(device) for device in devices]
    return _mirrored_strategy(
        tuple(f"/{spec.device_type.lower()}:{spec.device_index}" for spec in specs)
    )


@functools.cache
def _mirrored_strategy(devices):
    # No cross_device_ops: TensorFlow 2.21's default is its collective all-reduce,
    # RING between CPU replicas and NCCL between GPUs (test_strategy.py checks it).
    # The public alternatives (NcclAllReduce, ReductionToOneDevice) take other
    # code paths, and Keras 3 fit behaves differently under them.
    strategy = tf.distribute.MirroredStrategy(list(devices) if devices else None)
    if strategy.num_replicas_in_sync > 1:
        on_gpus = "GPU" in strategy.extended.worker_devices[0]
        log.info("all-reduce: collective, %s", "NCCL between GPUs" if on_gpus else "RING")
    return strategy


def local_replicas(cpu_replicas=None):
    """The replicas this machine should have: one per GPU, or the CPU replicas asked for."""
    return cpu_replicas or max(len(tf.config.list_physical_devices("GPU")), 1)


def use_cpu_replicas(count):
    """Split the first CPU into `count` logical devices, one replica each.

    Must run before TensorFlow initializes its devices (before any op).
    """
    cpus = tf.config.list_physical_devices("CPU")
    wanted = [tf.config.LogicalDeviceConfiguration()] * count
    if tf.config.get_logical_device_configuration(cpus[0]) == wanted:
        return
    try:
        tf.config.set_logical_device_configuration(cpus[0], wanted)
    except RuntimeError:
        raise StrategyError(
            f"cannot split the CPU into {count} replicas: TensorFlow has already"
            " initialized its devices - call use_cpu_replicas() before any TensorFlow"
            " op (the CLI's --cpu-replicas does this for you)"
        ) from None


def make_local_strategy(cpu_replicas=None):
    """MirroredStrategy over this machine's GPUs, or `cpu_replicas` logical CPUs
    (gpu-smoke checks a machine with it)."""
    check_versions()
    gpus = tf.config.list_physical_devices("GPU")
    expected = local_replicas(cpu_replicas)
    if cpu_replicas is not None:
        if gpus:
            raise StrategyError(
                f"--cpu-replicas {cpu_replicas} is for CPU-only machines, but"
                f" {len(gpus)} GPU(s) are visible - drop the flag to use the GPUs, or"
                " hide them with CUDA_VISIBLE_DEVICES=-1"
            )
        use_cpu_replicas(cpu_replicas)
        devices = [device.name for device in tf.config.list_logical_devices("CPU")]
        strategy = mirrored_strategy(devices[:cpu_replicas])
    else:
        strategy = mirrored_strategy()
    if strategy.num_replicas_in_sync != expected:
        raise StrategyError(
            f"expected {expected} replicas but the strategy has"
            f" {strategy.num_replicas_in_sync} - check CUDA_VISIBLE_DEVICES and the"
            " TensorFlow GPU install (pip install '.[gpu]')"
        )
    if not gpus and cpu_replicas is None:
        log.warning(
            "no GPU visible: training on 1 CPU replica (use --cpu-replicas N to"
            " simulate N replicas)"
        )
    return strategy


def global_batch_size(strategy, per_replica_batch_size, accumulate_steps=1):
    """The batch one training step (one update) consumes across every replica of
    every worker."""
    return per_replica_batch_size * strategy.num_replicas_in_sync * accumulate_steps


def describe(strategy, per_replica_batch_size, accumulate_steps=1):
    devices = getattr(strategy.extended, "worker_devices", ())
    lines = [
        f"strategy: {type(strategy).__name__}",
        f"devices: {', '.join(devices)}",
        f"workers: {worker_count(strategy)}",
        f"replicas: {strategy.num_replicas_in_sync}",
        f"per-replica batch: {per_replica_batch_size}",
    ]
    if accumulate_steps > 1:
        lines.append(f"gradient accumulation: {accumulate_steps} micro-batches per update")
    batch = global_batch_size(strategy, per_replica_batch_size, accumulate_steps)
    return [*lines, f"global batch: {batch}"]
{% include "distribute/strategy/" ~ cookiecutter.distribution ~ ".py" %}