import pytest
{%- if cookiecutter.distribution == "mirrored" %}
import tensorflow as tf
{%- endif %}

from {{ cookiecutter.package_name }}.strategy import (
    StrategyError,
{%- if cookiecutter.keras_package == "keras3" %}
    check_keras_version,
{%- endif %}
    check_tensorflow_version,
    describe,
    global_batch_size,
{%- if cookiecutter.distribution == "mirrored" %}
    make_strategy,
    use_cpu_replicas,
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
{%- if cookiecutter.keras_package == "keras3" %}


@pytest.mark.parametrize("version", ["3.7.0", "3.4.1", "2.15.0"])
def test_keras_before_3_8_is_refused(version):
    with pytest.raises(StrategyError, match=rf"keras {version} is too old.*keras>=3.8"):
        check_keras_version(version)


@pytest.mark.parametrize("version", ["3.8.0", "3.15.1", "4.0.0"])
def test_keras_3_8_and_later_are_accepted(version):
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
