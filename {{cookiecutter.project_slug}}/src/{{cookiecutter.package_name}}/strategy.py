"""The one place a tf.distribute strategy is made, checked and described."""

import functools
import logging
{%- if cookiecutter.distribution == "multi_worker" %}
import re
{%- endif %}
{% if cookiecutter.keras_package == "keras3" %}
import keras
{%- endif %}
import tensorflow as tf
{% if cookiecutter.distribution == "multi_worker" %}
from {{ cookiecutter.package_name }} import TrainerError, first_line
from {{ cookiecutter.package_name }}.cluster import read_tf_config
{%- else %}
from {{ cookiecutter.package_name }} import TrainerError
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
{%- if cookiecutter.distribution == "multi_worker" %}


# Gradients are all-reduced in packs of this size: a few large messages, not
# one per variable (latency, not bandwidth, bounds many small ones).
BYTES_PER_PACK = 32 * 2**20
{%- endif %}


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
    options = communication_options(bool(tf.config.list_physical_devices("GPU")))
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    log.info(
        "all-reduce: %s, gradients packed into %d MiB messages",
        options.implementation.name,
        options.bytes_per_pack // 2**20,
    )
    return strategy


# A collective (gradient all-reduce, synchronized batch normalization, the
# preemption flag, a checkpoint) aborted because a peer is gone. TensorFlow says
# it as UnavailableError or AbortedError (a worker that died, or the chief and
# its coordination service: "failed to connect to all addresses"), or as
# FailedPreconditionError when a peer restarted mid-run (a new incarnation).
PEER_ERRORS = (tf.errors.UnavailableError, tf.errors.AbortedError)
PEER_RESTARTED = re.compile(r"has restarted|incarnation", re.IGNORECASE)
# Where the message names the lost task: missed heartbeats (the coordination
# service), the strategy's health check (every 30 s), a failed call to it.
LOST_TASK = re.compile(
    r"unhealthy \(stopped sending heartbeats\):\s*(/job:\w+/replica:\d+/task:\d+)"
    r"|check alive failed, (/job:\w+/replica:\d+/task:\d+) is down"
    r"|remote target (/job:\w+/replica:\d+/task:\d+)"
    r"|(/job:\w+/replica:\d+/task:\d+)"
)


def lost_worker_message(err):
    """One line for TensorFlow's abort of the collectives when a peer is lost;
    None for an error that is not about a peer (a bug in this worker)."""
    peer_restarted = isinstance(err, tf.errors.FailedPreconditionError) and PEER_RESTARTED.search(
        err.message
    )
    if not (isinstance(err, PEER_ERRORS) or peer_restarted):
        return None
    found = LOST_TASK.search(err.message)
    task = next(group for group in found.groups() if group) if found else None
    peer = f"the worker {task}" if task else "a peer worker"
    return (
        f"{peer} stopped answering ({type(err).__name__}: {first_line(err, 160)}), so"
        " TensorFlow aborted the all-reduce - see that worker's log; restarting the job"
        " resumes every worker from the last checkpoint"
    )


def communication_options(gpus):
    """How the workers all-reduce: NCCL between GPUs, RING (gRPC) between CPUs;
    many small gradients packed into few messages.

    No `timeout_seconds`: TensorFlow starts a thread per collective for it (its
    docs: for debugging only). A dead worker is noticed without it, by missed
    heartbeats (8 s after a SIGKILL in a 2-worker run) or else the strategy's
    health check (every 30 s), which abort the collectives: see
    lost_worker_message.
    """
    implementation = tf.distribute.experimental.CommunicationImplementation
    return tf.distribute.experimental.CommunicationOptions(
        bytes_per_pack=BYTES_PER_PACK,
        implementation=implementation.NCCL if gpus else implementation.RING,
    )


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
