"""The one place a tf.distribute strategy is made, checked and described."""

import functools
import logging
{% if cookiecutter.keras_package == "keras3" %}
import keras
{%- endif %}
import tensorflow as tf

from {{ cookiecutter.package_name }} import TrainerError
{%- if cookiecutter.distribution == "multi_worker" %}
from {{ cookiecutter.package_name }}.cluster import read_tf_config
{%- endif %}

log = logging.getLogger(__name__)
{%- if cookiecutter.keras_package == "keras3" %}

# Keras < 3.5 did not all-reduce gradients under a strategy (keras-team/keras#19891);
# Keras < 3.8 did not scale the loss by 1/replicas (keras-team/keras#20609). Both silent.
MIN_KERAS = (3, 8)
{%- endif %}


# What pyproject.toml pins; the tests and the facts behind this code are for it.
SUPPORTED_TENSORFLOW = ((2, 21), (2, 22))


class StrategyError(TrainerError):
    pass


def version_tuple(version):
    return tuple(int(part) for part in version.split(".")[:2] if part.isdigit())


def check_tensorflow_version(version=None):
    version = version or tf.__version__
    low, high = SUPPORTED_TENSORFLOW
    if not low <= version_tuple(version) < high:
        raise StrategyError(
            f"tensorflow {version} is not supported: this project is written and tested"
            f" for {low[0]}.{low[1]}.x - pip install 'tensorflow>={low[0]}.{low[1]},"
            f"<{high[0]}.{high[1]}'"
        )
{%- if cookiecutter.keras_package == "keras3" %}


def check_keras_version(version=None):
    version = version or keras.__version__
    if version_tuple(version) < MIN_KERAS:
        raise StrategyError(
            f"keras {version} is too old: before 3.8 it silently skips the gradient"
            " all-reduce or the loss scaling under tf.distribute - pip install 'keras>=3.8'"
        )
{%- endif %}


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
    return tf.distribute.MirroredStrategy(list(devices) if devices else None)


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
{%- if cookiecutter.distribution == "mirrored" %}


def make_strategy(cpu_replicas=None):
    """MirroredStrategy over every visible GPU, or `cpu_replicas` logical CPUs."""
{%- else %}


def make_local_strategy(cpu_replicas=None):
    """MirroredStrategy over this machine's GPUs, or `cpu_replicas` logical CPUs
    (gpu-smoke checks a machine with it)."""
{%- endif %}
    check_tensorflow_version()
{%- if cookiecutter.keras_package == "keras3" %}
    check_keras_version()
{%- endif %}
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
{%- if cookiecutter.distribution == "mirrored" %}


def worker_count(strategy):
    return 1


def is_chief(strategy):
    """One machine: this process keeps the checkpoints and writes the summary."""
    return True
{%- else %}


def make_strategy():
    """MultiWorkerMirroredStrategy from TF_CONFIG (a single worker without it).

    Must run before any other TensorFlow op.
    """
    check_tensorflow_version()
{%- if cookiecutter.keras_package == "keras3" %}
    check_keras_version()
{%- endif %}
    cluster = read_tf_config()
    if cluster is None:
        log.info("TF_CONFIG is not set: running as a single worker")
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    return strategy


def worker_count(strategy):
    resolver = strategy.cluster_resolver
    if resolver is None:  # a single-machine strategy (tests use them as references)
        return 1
    cluster = resolver.cluster_spec().as_dict()
    return sum(len(cluster.get(task_type, [])) for task_type in ("chief", "worker")) or 1


def is_chief(strategy):
    """The worker whose checkpoints and exports are kept: the "chief" task when the
    cluster has one, else worker 0 (TensorFlow's own rule)."""
    return strategy.extended.should_checkpoint
{%- endif %}


def global_batch_size(strategy, per_replica_batch_size):
    """The batch one training step consumes across every replica of every worker."""
    return per_replica_batch_size * strategy.num_replicas_in_sync


def describe(strategy, per_replica_batch_size):
    devices = getattr(strategy.extended, "worker_devices", ())
    lines = [
        f"strategy: {type(strategy).__name__}",
        f"devices: {', '.join(devices)}",
        f"workers: {worker_count(strategy)}",
        f"replicas: {strategy.num_replicas_in_sync}",
        f"per-replica batch: {per_replica_batch_size}",
        f"global batch: {global_batch_size(strategy, per_replica_batch_size)}",
    ]
    return lines
