"""The optimizer, built by the engines under `strategy.scope()` so its slots
are mirrored on every replica."""

from {{ cookiecutter.package_name }}.compat import keras


def make_optimizer(name, learning_rate):
    """Adam for real runs; plain SGD is what equivalence checks use (Adam hides
    loss-scaling errors)."""
    if name == "sgd":
        return keras.optimizers.SGD(learning_rate=learning_rate)
    return keras.optimizers.Adam(learning_rate=learning_rate)
