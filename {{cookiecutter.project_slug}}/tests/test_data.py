import numpy as np
import pytest
import tensorflow as tf

from {{ cookiecutter.package_name }} import data
from {{ cookiecutter.package_name }}.data import (
    NUM_CLASSES,
    DataError,
    count_examples,
    evaluation_batches,
    plan_run,
    synthetic_arrays,
    training_batches,
)


def examples(count):
    features, labels = synthetic_arrays(count, seed=0)
    return tf.data.Dataset.from_tensor_slices((features, labels))


def test_infinite_data_needs_steps_per_epoch():
    with pytest.raises(DataError, match=r"infinite \(repeat\(\)\) - set --steps-per-epoch"):
        count_examples(examples(64).repeat(), global_batch_size=32)


def test_unknown_size_needs_steps_per_epoch():
    filtered = examples(64).filter(lambda features, label: label >= 0)
    with pytest.raises(DataError, match="unknown size .* set --steps-per-epoch"):
        count_examples(filtered, global_batch_size=32)


def test_explicit_steps_accept_unbounded_data():
    assert count_examples(examples(64).repeat(), 32, steps_per_epoch=5) is None


def test_fewer_examples_than_one_global_batch_is_refused():
    with pytest.raises(DataError, match="has 20 examples, fewer than one global batch of 32"):
        count_examples(examples(20), global_batch_size=32)


def test_finite_data_is_counted():
    assert count_examples(examples(100), global_batch_size=32) == 100


def test_training_batches_are_all_full_global_batches():
    shapes = [f.shape[0] for f, _ in training_batches(examples(100), 32, seed=0)]
    assert shapes == [32, 32, 32]


def test_each_replica_gets_its_share_of_the_global_batch(two_replicas):
    batches = training_batches(examples(128), 32, seed=0)
    distributed = two_replicas.experimental_distribute_dataset(batches)
    for features, labels in distributed:
        local = two_replicas.experimental_local_results(features)
        assert [part.shape[0] for part in local] == [16, 16]
        assert sum(part.shape[0] for part in two_replicas.experimental_local_results(labels)) == 32


def test_evaluation_batches_keep_their_order():
    features, _ = synthetic_arrays(64, seed=0)
    first, _ = next(iter(evaluation_batches(examples(64), 32)))
    np.testing.assert_array_equal(first.numpy(), features[:32])


def test_shuffle_order_depends_only_on_the_seed():
    def order(batches):
        return [labels.numpy().tolist() for _, labels in batches]

    batches = training_batches(examples(64), 32, seed=1)
    # Every pass over the same dataset, not only a rebuilt one, sees the same order.
    assert order(batches) == order(batches) == order(training_batches(examples(64), 32, 1))
    assert order(batches) != order(training_batches(examples(64), 32, seed=2))


def test_synthetic_task_is_fixed_and_uses_every_class():
    features, labels = synthetic_arrays(2000, seed=0)
    again_features, again_labels = synthetic_arrays(2000, seed=0)
    np.testing.assert_array_equal(features, again_features)
    np.testing.assert_array_equal(labels, again_labels)
    counts = np.bincount(labels, minlength=NUM_CLASSES)
    assert counts.min() > 0.05 * len(labels), counts


def test_an_empty_evaluation_set_is_refused(one_device, sgd_config, monkeypatch):
    def without_evaluation(config, num_workers=1):
        train, evaluation = load_examples(config, num_workers)
        return train, evaluation.take(0)

    load_examples = data.load_examples
    monkeypatch.setattr(data, "load_examples", without_evaluation)
    with pytest.raises(DataError, match=r"^the evaluation dataset is empty - return some"):
        plan_run(sgd_config("empty-eval", 32), one_device)
