"""Gradient accumulation (--accumulate-steps k): one optimizer update from k
micro-batches, for a global batch that does not fit on the replicas at once.

Each replica takes k x per-replica examples a step, cuts them into k
micro-batches and runs them one after another (memory: one micro-batch's
activations, and one copy of the gradients), summing their gradients; the
optimizer then applies the sum once, all-reducing it across the replicas as
for any step. One update's global batch is k x replicas x per-replica batch,
and steps, epochs, checkpoints and the learning-rate schedule count updates:
a checkpoint always falls between two updates, so a resume stays exact.

The micro-batches are k copies of the step in the graph, not a tf.while_loop:
a cross-replica sum inside the step (synchronized batch normalization, tf_keras
reading its metrics in train_step) cannot run inside a loop in the replica
context. Tracing the step takes about k times as long.

Batch normalization sees a micro-batch (times the replicas when synchronized),
not the update's global batch.
"""

import tensorflow as tf


def micro_batches(batch, steps):
    """`batch` (a structure of tensors) cut into `steps` equal micro-batches."""
    if steps == 1:
        return [batch]
    parts = [tf.split(tensor, steps) for tensor in tf.nest.flatten(batch)]
    return [
        tf.nest.pack_sequence_as(batch, [part[index] for part in parts]) for index in range(steps)
    ]


def add_gradients(total, gradients):
    """Gradient sums, variable by variable (None: no gradient; sparse
    gradients, an embedding's, are summed dense)."""
    return [
        gradient
        if sum_ is None
        else sum_
        if gradient is None
        else tf.convert_to_tensor(sum_) + tf.convert_to_tensor(gradient)
        for sum_, gradient in zip(total, gradients, strict=True)
    ]


def accumulate(micro_step, batch, steps):
    """micro_step(micro-batch) -> (loss, gradients), summed over the `steps`
    micro-batches of this replica's `batch`; one step is micro_step(batch)."""
    first, *others = micro_batches(batch, steps)
    loss, gradients = micro_step(first)
    for micro_batch in others:
        # After the last micro-batch's gradients: one micro-batch's activations
        # in memory at a time, not k side by side.
        with tf.control_dependencies([gradient for gradient in gradients if gradient is not None]):
            micro_batch = tf.nest.map_structure(tf.identity, micro_batch)
        micro_loss, micro_gradients = micro_step(micro_batch)
        loss += micro_loss
        gradients = add_gradients(gradients, micro_gradients)
    return loss, gradients
