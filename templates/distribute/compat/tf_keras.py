import tensorflow as tf
import tf_keras as keras

KERAS_PACKAGE = "tf_keras"

# tf_keras's random layers draw, by default, from stateful random ops seeded by the
# traced graph: every worker of a job draws the same masks, and their state cannot
# be checkpointed. With this, each random layer draws from a tf.random.Generator
# (a variable: checkpointed, and per replica under a strategy). Before any model.
keras.backend.experimental.enable_tf_random_generator()


def version_tuple(version):
    return tuple(int(part) for part in version.split(".")[:2] if part.isdigit())


def keras_version_problem(version=None):
    """Why this tf_keras does not go with this TensorFlow, or None: each tf_keras
    release is built for one TensorFlow minor version."""
    version = version or keras.__version__
    if version_tuple(version) != version_tuple(tf.__version__):
        major, minor = version_tuple(tf.__version__)
        return (
            f"tf_keras {version} is not the release for tensorflow {tf.__version__} -"
            f" pip install 'tf-keras=={major}.{minor}.*'"
        )
    return None


# What the doctor's upstream check says when broken_upstream finds nothing.
NONE_BROKEN_UPSTREAM = "no option of this project is known to be broken upstream"


def broken_upstream(replicas, optimizer, model):
    """What of this optimizer and model tf_keras gets wrong on several replicas:
    nothing this project uses."""
    return []


{%- if cookiecutter.mixed_precision == "float16" %}


def loss_scale_optimizer(optimizer):
    return keras.mixed_precision.LossScaleOptimizer(optimizer)


def is_loss_scale_optimizer(optimizer):
    return isinstance(optimizer, keras.mixed_precision.LossScaleOptimizer)


def scale_loss(optimizer, loss):
    return optimizer.get_scaled_loss(loss)


def unscale_gradients(optimizer, gradients):
    return optimizer.get_unscaled_gradients(gradients)
{%- endif %}


def clip_after_the_all_reduce(optimizer, clip_norm):
    """fit's gradient clipping: tf_keras's apply_gradients sums the replicas'
    gradients, then clips to `global_clipnorm` (tested against one device)."""
    optimizer.global_clipnorm = clip_norm


def apply_summed_gradients(optimizer, grads_and_vars):
    """Apply gradients the replicas have summed already, in the replica context."""
    optimizer.apply_gradients(grads_and_vars, skip_gradients_aggregation=True)


def per_replica_randomness(model):
    """Nothing to change: a tf.random.Generator made under a strategy's scope
    gives each replica of the job, on every worker, its own numbers."""


def random_layers(model):
    """The model's layers that draw random numbers: those with a random generator
    (Dropout, the noise layers, the Random* augmentations: tf_keras's
    BaseRandomLayer)."""
    return [
        layer
        for layer in model._flatten_layers()
        if hasattr(getattr(layer, "_random_generator", None), "make_seed_for_stateless_op")
    ]


def random_state(model):
    """The state of the random layers' tf.random.Generators, for the checkpoint:
    tf_keras leaves it out of the model's, and a run resumed without it would draw
    other masks than an uninterrupted one."""
    generators = [layer._random_generator._generator for layer in random_layers(model)]
    return [generator.state for generator in generators if generator is not None]


def metric_results(model):
    """The compiled model's metrics by name (loss first), as tensors."""
    return {metric.name: metric.result() for metric in model.metrics}


def tf_variable(variable):
    """The TensorFlow variable behind a Keras variable (under a strategy, one
    with a copy per replica)."""
    return variable


def variable_path(variable):
    """The variable's name, unique in its model (its layer's name first)."""
    return variable.name


def is_distributed(variable):
    """True when the variable has a copy per replica (mirrored or sync-on-read)."""
    return isinstance(tf_variable(variable), tf.distribute.DistributedValues)


def replica_copies(strategy, variable):
    """The variable's value on each replica, as NumPy arrays."""
    return [value.numpy() for value in strategy.experimental_local_results(tf_variable(variable))]


def save_for_serving(model, serve, path):
    """A SavedModel at `path` whose serving_default signature is `serve`. A plain
    tf.Module holds the weights: a saved tf_keras model would make every loader
    import tf_keras."""
    servable = tf.Module()
    servable.weights = list(model.weights)
    servable.serve = serve
    tf.saved_model.save(servable, path, signatures={"serving_default": serve})
