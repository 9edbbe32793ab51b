import keras
{%- if cookiecutter.mixed_precision == "float16" %}
import numpy as np
{%- endif %}
import tensorflow as tf

from {{ cookiecutter.package_name }} import TrainerError

KERAS_PACKAGE = "keras3"
# Keras < 3.5 did not all-reduce gradients under a strategy (keras-team/keras#19891);
# Keras < 3.8 did not scale the loss by 1/replicas (keras-team/keras#20609). Both silent.
MIN_KERAS = (3, 8)


def version_tuple(version):
    return tuple(int(part) for part in version.split(".")[:2] if part.isdigit())


def keras_version_problem(version=None):
    """Why this Keras would train wrong under a strategy, or None."""
    version = version or keras.__version__
    if version_tuple(version) < MIN_KERAS:
        return (
            f"keras {version} is too old: before 3.8 it silently skips the gradient"
            " all-reduce or the loss scaling under tf.distribute - pip install 'keras>=3.8'"
        )
    return None


# What the doctor's upstream check says when broken_upstream finds nothing (facts, section 3).
NONE_BROKEN_UPSTREAM = (
    "no option known to be broken upstream (jit_compile keras#19005, the optimizer's"
    " gradient clipping)"
)


def broken_upstream(replicas, optimizer, model):
    """What of this optimizer and model Keras 3 gets wrong on several replicas,
    one line each."""
    if replicas < 2:
        return []
    problems = []
    optimizer = getattr(optimizer, "inner_optimizer", optimizer)
    clipping = [
        name
        for name in ("clipnorm", "global_clipnorm", "clipvalue")
        if getattr(optimizer, name, None)
    ]
    if clipping:
        problems.append(
            f"the optimizer's {'/'.join(clipping)} clips each replica's gradient before"
            " the all-reduce in Keras 3, so results differ from one device - leave it out"
            " of the optimizer and use --clip-norm (the custom loop clips the sum)"
        )
    if getattr(model, "jit_compile", False) is True:
        problems.append(
            "jit_compile=True fails under MirroredStrategy with several replicas"
            " (https://github.com/keras-team/keras/issues/19005) - compile with"
            " jit_compile=False"
        )
    return problems


{%- if cookiecutter.mixed_precision == "float16" %}


class LossScaleOptimizer(keras.optimizers.LossScaleOptimizer):
    """Keras 3's loss-scale optimizer, with every replica agreeing on whether a
    step's gradients are finite.

    Keras 3.15 takes that decision from replica 0's gradients, before the
    all-reduce (LossScaleOptimizer._tf_apply, whose comment assumes all-reduced
    gradients): an overflow on any other replica reaches the weights as inf and
    the scale is not halved. Dynamic loss scaling overflows on purpose every
    ~2,000 steps, so a multi-GPU run meets this within hours. Here the replicas
    first sum their overflow flags; a step that overflowed anywhere hands
    non-finite gradients to every replica, so all of them skip it and halve the
    scale, as tf_keras does.
    """

    def apply(self, grads, trainable_variables=None):
        context = tf.distribute.get_replica_context()
        if context is not None and context.num_replicas_in_sync > 1:
            overflows = tf.cast(tf.logical_not(self.check_finite(grads)), tf.float32)
            overflowed = context.all_reduce(tf.distribute.ReduceOp.SUM, overflows) > 0
            grads = [None if grad is None else marked(grad, overflowed) for grad in grads]
        return super().apply(grads, trainable_variables)


def marked(grad, overflowed):
    """`grad`, or inf in its place when some replica's gradients overflowed."""
    if isinstance(grad, tf.IndexedSlices):  # embeddings: keep the gradient sparse
        return tf.IndexedSlices(marked(grad.values, overflowed), grad.indices, grad.dense_shape)
    return tf.where(overflowed, tf.constant(np.inf, grad.dtype), grad)


def loss_scale_optimizer(optimizer):
    return LossScaleOptimizer(optimizer)


def is_loss_scale_optimizer(optimizer):
    return isinstance(optimizer, keras.optimizers.LossScaleOptimizer)


def scale_loss(optimizer, loss):
    return optimizer.scale_loss(loss)


def unscale_gradients(optimizer, gradients):
    # Keras 3's LossScaleOptimizer unscales inside apply_gradients.
    return gradients
{%- endif %}


class ReplicaSeedGenerator(keras.random.SeedGenerator):
    """A SeedGenerator that gives each replica its own random numbers.

    Keras 3's random layers (Dropout, GaussianNoise, the Random* augmentations)
    draw from a SeedGenerator whose state is one mirrored variable, so under a
    strategy every replica draws the same numbers: N replicas put the same
    dropout mask on their shares of the batch, where one device draws a mask per
    example. Folding the replica's id into each seed gives every replica its own
    stream, as tf_keras does; the state, and so the checkpoints, are unchanged.
    """

    def next(self, ordered=True):
        seed = super().next(ordered)
        context = tf.distribute.get_replica_context()
        if context is None:  # cross-replica context: no replica to tell apart
            return seed
        replica = context.replica_id_in_sync_group
        return tf.cast(tf.random.experimental.stateless_fold_in(seed, replica), seed.dtype)


def clip_after_the_all_reduce(optimizer, clip_norm):
    """Refused: Keras 3's optimizer clips (clipnorm, global_clipnorm) in `apply`,
    before the all-reduce, each replica its own share. No Keras 3 issue found;
    tf.keras once refused clipping under a strategy for this very reason
    (tensorflow/tensorflow#33929)."""
    raise TrainerError(
        f"--clip-norm {clip_norm} with the fit loop: Keras 3's optimizer clips each"
        " replica's gradient before the all-reduce, so N replicas would not compute what"
        " one device computes - use the custom loop, which clips the summed gradient"
    )


def apply_summed_gradients(optimizer, grads_and_vars):
    """Apply gradients the replicas have summed already, in the replica context.
    Keras 3's apply_gradients always sums them across replicas, and has no
    switch: its _all_reduce_sum_gradients is passed over here (the equivalence
    test of clipping notices the day that private method changes)."""
    optimizer._all_reduce_sum_gradients = lambda summed: summed
    optimizer.apply_gradients(grads_and_vars)


def per_replica_randomness(model):
    """Give the model's random layers their own numbers on each replica (see
    ReplicaSeedGenerator)."""
    for layer in model._flatten_layers():
        for generator in layer._seed_generators:
            generator.__class__ = ReplicaSeedGenerator


def random_layers(model):
    """The model's layers that draw random numbers: those with a SeedGenerator
    (Dropout, the noise layers, the Random* augmentations, a layer of your own)."""
    return [layer for layer in model._flatten_layers() if layer._seed_generators]


def random_state(model):
    """The state of the random layers' SeedGenerators, for the checkpoint: Keras
    leaves it out of the model's, and a run resumed without it would draw other
    masks than an uninterrupted one."""
    return [
        generator.state.value
        for layer in random_layers(model)
        for generator in layer._seed_generators
    ]


def metric_results(model):
    """The compiled model's metrics by name (loss first), as tensors."""
    return model.get_metrics_result()


def tf_variable(variable):
    """The TensorFlow variable behind a Keras variable (under a strategy, one
    with a copy per replica)."""
    return variable.value


def variable_path(variable):
    """The variable's name, unique in its model (its layer's name first)."""
    return variable.path


def is_distributed(variable):
    """True when the variable has a copy per replica (mirrored or sync-on-read)."""
    return isinstance(tf_variable(variable), tf.distribute.DistributedValues)


def replica_copies(strategy, variable):
    """The variable's value on each replica, as NumPy arrays."""
    return [value.numpy() for value in strategy.experimental_local_results(tf_variable(variable))]


def save_for_serving(model, serve, path):
    """A SavedModel at `path` whose serving_default signature is `serve` (Keras 3's
    model.export, with this signature)."""
    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint("serving_default", serve)
    archive.write_out(path, verbose=False)
