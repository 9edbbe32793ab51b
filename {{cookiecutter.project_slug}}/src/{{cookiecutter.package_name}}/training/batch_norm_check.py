"""Whether batch normalization's moving averages have caught up with the weights.

A BatchNormalization layer normalizes with each batch's own statistics in
training, and with moving averages of them in evaluation and serving. With a
momentum near 1 (keras.applications backbones use 0.999) the averages take
thousands of steps to follow the weights: a short fine-tuning run can end with a
model that does well on its training batches and at chance on anything else.
At the end of a run every worker scores the same few held-out batches both
ways, on a copy of the final model built outside the strategy (no collective
runs and nothing of the run changes; the workers stay in step for the end of
the run), and warns in one line when the loss with the moving averages is far
above the loss with batch statistics and the training loss.
"""

import logging

import numpy as np
import tensorflow as tf

from {{ cookiecutter.package_name }} import first_line
from {{ cookiecutter.package_name }}.distribute.compat import keras
from {{ cookiecutter.package_name }}.task import build_model, per_example_loss

log = logging.getLogger(__name__)

# Held-out batches of the per-replica batch size scored each way.
CHECK_BATCHES = 4
# "Far above": the loss with the moving averages at least this many times the
# loss with batch statistics (and the training loss). The batch-statistics pass
# runs in training mode, dropout and augmentation on, which if anything raises
# its loss: a model whose averages are right scores about the same, or better,
# with them.
LAG_RATIO = 2.0


def has_batch_norm(model):
    return any(
        isinstance(layer, keras.layers.BatchNormalization) for layer in model._flatten_layers()
    )


def check_moving_averages(model, statistics, batches, training_loss=None):
    """{"moving_averages": mean loss with them, "batch_statistics": with those}
    of `model`'s weights over `batches` ((inputs, labels) of one device), or None
    when the model has no batch normalization or there are no batches; a
    warning when the first is far above the second and above `training_loss`
    (the run's last: a loss near zero is not lagging for being twice another).
    A check that fails says why in one line and gives None: the run it ends
    has trained and saved its model, and it stands.

    A copy scores them, built by task.build_model(statistics) outside
    strategy.scope() (on this device alone): a training-mode call updates the
    moving averages, and would run the synchronized layers' all-reduce on the
    run's replicas."""
    if not has_batch_norm(model):
        return None
    try:
        losses = losses_both_ways(model, statistics, batches)
    except Exception as err:  # noqa: BLE001 - whatever a user's model raises
        log.warning(
            "no check of the batch-normalization moving averages: %s: %s",
            type(err).__name__,
            first_line(err, 200),
        )
        return None
    if losses is None:
        return None
    moving_averages, batch_statistics = losses
    far_above = LAG_RATIO * max(batch_statistics, training_loss or 0.0)
    if moving_averages >= far_above:
        log.warning(
            "held-out loss %.4g with the batch-normalization moving averages, %.4g with"
            " batch statistics: the averages lag the weights, so evaluation and the"
            " exported model do worse than training - lower the BatchNormalization"
            " layers' momentum (docs/your-model.md: Batch normalization) or train longer",
            moving_averages,
            batch_statistics,
        )
    return {"moving_averages": moving_averages, "batch_statistics": batch_statistics}


def losses_both_ways(model, statistics, batches):
    """(mean loss with the moving averages, with batch statistics), or None."""
    copy = None
    sums = np.zeros(2)
    examples = 0
    for inputs, labels in batches:
        if copy is None:
            copy = build_model(statistics)
            copy(inputs, training=False)  # built, for a model of your own class
            copy.set_weights(model.get_weights())
        for column, training in enumerate((False, True)):
            losses = per_example_loss(labels, copy(inputs, training=training))
            sums[column] += float(tf.reduce_sum(tf.cast(losses, tf.float64)))
        examples += int(tf.shape(labels)[0])
    if not examples:
        return None
    moving_averages, batch_statistics = (float(loss) for loss in sums / examples)
    return moving_averages, batch_statistics
