"""Whether batch normalization's moving averages have caught up with the weights.

A BatchNormalization layer normalizes with each batch's own statistics in
training, and with moving averages of them in evaluation and serving. With a
momentum near 1 (keras.applications backbones use 0.999) the averages take
thousands of steps to follow the weights: a short fine-tuning run can end with a
model that does well on its training batches and at chance on anything else.
At the end of a run the chief scores a few held-out batches both ways, on a copy
of the final model built outside the strategy (no collective runs and nothing of
the run changes), and warns in one line when the loss with the moving averages
is far above the loss with batch statistics.
"""

import logging

import numpy as np
import tensorflow as tf

from {{ cookiecutter.package_name }} import first_line
from {{ cookiecutter.package_name }}.compat import keras
from {{ cookiecutter.package_name }}.task import build_model, per_example_loss

log = logging.getLogger(__name__)

# Held-out batches of the per-replica batch size scored each way.
CHECK_BATCHES = 4
# "Far above": the loss with the moving averages at least this many times the
# loss with batch statistics. The batch-statistics pass runs in training mode,
# dropout and augmentation on, which if anything raises its loss: a model whose
# averages are right scores about the same, or better, with them.
LAG_RATIO = 2.0


def has_batch_norm(model):
    return any(
        isinstance(layer, keras.layers.BatchNormalization) for layer in model._flatten_layers()
    )


def check_moving_averages(model, statistics, batches):
    """{"moving_averages": mean loss with them, "batch_statistics": with those}
    of `model`'s weights over `batches` ((inputs, labels) of one device), or None
    when the model has no batch normalization or there are no batches; a
    warning when the first is far above the second.

    A copy scores them, built by task.build_model(statistics) outside
    strategy.scope() (on this device alone): a training-mode call updates the
    moving averages, and would run the synchronized layers' all-reduce on the
    run's replicas."""
    if not has_batch_norm(model):
        return None
    copy = None
    sums = np.zeros(2)
    examples = 0
    for inputs, labels in batches:
        if copy is None:
            copy = build_model(statistics)
            copy(inputs, training=False)  # built, for a model of your own class
            try:
                copy.set_weights(model.get_weights())
            except ValueError as err:
                log.info(
                    "no check of the batch-normalization moving averages: the model"
                    " task.build_model builds does not take the trained weights (%s)",
                    first_line(err, 160),
                )
                return None
        for column, training in enumerate((False, True)):
            losses = per_example_loss(labels, copy(inputs, training=training))
            sums[column] += float(tf.reduce_sum(tf.cast(losses, tf.float64)))
        examples += int(tf.shape(labels)[0])
    if not examples:
        return None
    moving_averages, batch_statistics = (float(loss) for loss in sums / examples)
    if moving_averages >= LAG_RATIO * batch_statistics:
        log.warning(
            "held-out loss %.4g with the batch-normalization moving averages, %.4g with"
            " batch statistics: the averages lag the weights, so evaluation and the"
            " exported model do worse than training - lower the BatchNormalization"
            " layers' momentum (README: Batch normalization) or train longer",
            moving_averages,
            batch_statistics,
        )
    return {"moving_averages": moving_averages, "batch_statistics": batch_statistics}
