"""LAMB (You et al. 2019): Adam's step with the weight decay added to it, scaled
for each layer by the trust ratio |weights| / |step|, so that every layer moves
by about the learning rate times its own norm, whatever its gradients' scale.
Large-batch runs keep Adam's accuracy under it where Adam's falls (BERT
pre-training at a batch of 32k).

Biases and normalization scales and offsets take Adam's step alone, neither
decayed nor scaled, as in the paper's BERT runs (tensorflow/models' LAMB with
BERT's settings). They are told apart by rank, as AdamW's exclusions are
(training/optimizer.py): rank 0 or 1, which an EinsumDense bias (rank 2, in
MultiHeadAttention) is not. Keras 3's own keras.optimizers.Lamb scales and
decays every variable, and decays outside the ratio; tf_keras has none. Hence
one class per Keras package on the same `lamb_step`, its variables the
optimizer's own (mirrored under `strategy.scope()`, in every checkpoint).
"""

import tensorflow as tf

from {{ cookiecutter.package_name }}.distribute.compat import keras


def is_layer_weight(variable):
    """Kernels and embeddings: what the decay and the trust ratio apply to."""
    return len(variable.shape) >= 2


def lamb_step(weights, m_hat, v_hat, epsilon, weight_decay):
    """What LAMB subtracts from `weights` per unit of learning rate, from Adam's
    bias-corrected moments."""
    step = m_hat / (tf.sqrt(v_hat) + epsilon)
    if not is_layer_weight(weights):
        return step
    step += weight_decay * weights
    weights_norm = tf.norm(weights)
    step_norm = tf.norm(step)
    usable = tf.logical_and(weights_norm > 0, step_norm > 0)
    # A layer still at zero (or a zero step) takes Adam's step as it is.
    trust = tf.where(usable, weights_norm / tf.where(usable, step_norm, 1.0), 1.0)
    return trust * step


{% include "training/lamb/" ~ cookiecutter.keras_package ~ ".py" %}