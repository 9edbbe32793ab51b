import pytest
import tensorflow as tf

from {{ cookiecutter.package_name }}.distribute.strategy import (
    StrategyError,
    check_keras_version,
    check_tensorflow_version,
{%- if cookiecutter.distribution == "multi_worker" %}
    communication_options,
{%- endif %}
    describe,
    global_batch_size,
{%- if cookiecutter.distribution == "mirrored" %}
    make_strategy,
    use_cpu_replicas,
{%- else %}
    lost_worker_message,
{%- endif %}
)
{%- if cookiecutter.distribution == "mirrored" %}


def test_strategy_has_the_replicas_asked_for():
    strategy = make_strategy(cpu_replicas=2)
    assert isinstance(strategy, tf.distribute.MirroredStrategy)
    assert strategy.num_replicas_in_sync == 2
    assert [device.split("/")[-1] for device in strategy.extended.worker_devices] == [
        "device:CPU:0",
        "device:CPU:1",
    ]


def test_replicas_all_reduce_with_tensorflows_collective_ring_on_cpus():
    strategy = make_strategy(cpu_replicas=2)
    # TensorFlow's default, which the project relies on and logs (private names:
    # this fails the day a TensorFlow release changes it).
    assert type(strategy.extended._cross_device_ops).__name__ == "CollectiveAllReduce"
    ring = tf.distribute.experimental.CommunicationImplementation.RING
    assert strategy.extended._communication_options.implementation == ring


def test_changing_replicas_after_tensorflow_started_is_a_clear_error():
    tf.constant(1.0)  # TensorFlow's devices are initialized from here on
    with pytest.raises(StrategyError, match="already initialized its devices"):
        use_cpu_replicas(3)
{%- endif %}


def test_global_batch_counts_every_replica(two_replicas):
    assert global_batch_size(two_replicas, 16) == 32


def test_describe_names_replicas_and_batches(two_replicas):
    lines = describe(two_replicas, 16)
    assert "replicas: 2" in lines
    assert "per-replica batch: 16" in lines
    assert "global batch: 32" in lines
    assert not any(line.startswith("gradient accumulation") for line in lines)


def test_describe_counts_accumulated_micro_batches_in_the_global_batch(two_replicas):
    lines = describe(two_replicas, 16, accumulate_steps=3)
    assert "per-replica batch: 16" in lines
    assert "gradient accumulation: 3 micro-batches per update" in lines
    assert "global batch: 96" in lines
{%- if cookiecutter.keras_package == "keras3" %}


@pytest.mark.parametrize("version", ["3.7.0", "3.4.1", "2.15.0"])
def test_keras_before_3_8_is_refused(version):
    with pytest.raises(StrategyError, match=rf"keras {version} is too old.*keras>=3.8"):
        check_keras_version(version)


@pytest.mark.parametrize("version", ["3.8.0", "3.15.1", "4.0.0"])
def test_keras_3_8_and_later_are_accepted(version):
    check_keras_version(version)
{%- else %}


@pytest.mark.parametrize("version", ["2.20.0", "2.22.1", "3.8.0"])
def test_tf_keras_of_another_tensorflow_release_is_refused(version):
    refused = (
        rf"^tf_keras {version} is not the release for tensorflow 2\.21\.\d+ -"
        r" pip install 'tf-keras==2\.21\.\*'$"
    )
    with pytest.raises(StrategyError, match=refused):
        check_keras_version(version)


@pytest.mark.parametrize("version", ["2.21.0", "2.21.4"])
def test_tf_keras_of_this_tensorflow_release_is_accepted(version):
    check_keras_version(version)
{%- endif %}


@pytest.mark.parametrize("version", ["2.20.1", "2.22.0", "3.0.0"])
def test_tensorflow_outside_the_pinned_range_is_refused(version):
    refused = rf"^tensorflow {version} is not supported: .* 'tensorflow>=2.21,<2.22'$"
    with pytest.raises(StrategyError, match=refused):
        check_tensorflow_version(version)


@pytest.mark.parametrize("version", ["2.21.0", "2.21.3"])
def test_tensorflow_2_21_is_accepted(version):
    check_tensorflow_version(version)
{%- if cookiecutter.distribution == "multi_worker" %}


def test_workers_all_reduce_with_ring_on_cpus_and_nccl_on_gpus_in_large_packs():
    implementation = tf.distribute.experimental.CommunicationImplementation
    on_cpus, on_gpus = communication_options(gpus=False), communication_options(gpus=True)
    assert (on_cpus.implementation, on_gpus.implementation) == (
        implementation.RING,
        implementation.NCCL,
    )
    assert on_cpus.bytes_per_pack == on_gpus.bytes_per_pack == 32 * 2**20
    # No per-collective timeout thread: the strategy's health check finds dead workers.
    assert on_cpus.timeout_seconds is None


@pytest.mark.parametrize(
    "error, task",
    [
        # TensorFlow 2.21's words when a worker is SIGKILLed (seen 8 s after the kill).
        (
            tf.errors.UnavailableError(
                None,
                None,
                "Collective ops is aborted by: Error reported from /job:worker/task:1: The"
                " following tasks are unhealthy (stopped sending heartbeats):\n"
                "/job:worker/replica:0/task:1\nThe tasks have crashed. Check the task logs"
                " for an earlier error",
            ),
            "/job:worker/replica:0/task:1",
        ),
        # The strategy's own health check.
        (
            tf.errors.UnavailableError(
                None,
                None,
                "Collective ops is aborted by: cluster check alive failed,"
                " /job:worker/replica:0/task:1 is down\nThe error could be from a previous"
                " operation.",
            ),
            "/job:worker/replica:0/task:1",
        ),
        # Worker 0 (the chief, host of the coordination service) SIGKILLed: its peers
        # fail to reach it within about a second.
        (
            tf.errors.UnavailableError(
                None,
                None,
                "Collective ops is aborted by: failed to connect to all addresses; last"
                " error: UNKNOWN: ipv4:127.0.0.1:52763: Failed to connect to remote host:"
                " Connection refused\nAdditional GRPC error information from remote target"
                " /job:worker/replica:0/task:0 while calling"
                " /tensorflow.WorkerService/CompleteInstance:",
            ),
            "/job:worker/replica:0/task:0",
        ),
        (tf.errors.AbortedError(None, None, "Collective ops is aborted by: Socket closed"), None),
        (
            tf.errors.FailedPreconditionError(
                None, None, "Task /job:worker/replica:0/task:2 has restarted (incarnation 5)"
            ),
            "/job:worker/replica:0/task:2",
        ),
    ],
    ids=["missed-heartbeats", "health-check", "chief-lost", "aborted", "peer-restarted"],
)
def test_a_lost_worker_is_one_line_naming_it(error, task):
    message = lost_worker_message(error)
    peer = f"the worker {task}" if task else "a peer worker"
    assert message.startswith(f"{peer} stopped answering ({type(error).__name__}: ")
    assert "\n" not in message


def test_errors_not_about_a_peer_pass_through():
    uninitialized = tf.errors.FailedPreconditionError(
        None, None, "Could not find variable dense/kernel: it is uninitialized"
    )
    assert lost_worker_message(uninitialized) is None
    assert lost_worker_message(tf.errors.InvalidArgumentError(None, None, "bad shape")) is None
{%- endif %}
