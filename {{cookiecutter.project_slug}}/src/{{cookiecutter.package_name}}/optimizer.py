"""The optimizer, built by the engines under `strategy.scope()` so its slots
are mirrored on every replica."""

{% if cookiecutter.mixed_precision == "float16" -%}
from {{ cookiecutter.package_name }}.compat import keras, loss_scale_optimizer
{%- else -%}
from {{ cookiecutter.package_name }}.compat import keras
{%- endif %}


def make_optimizer(config):
    """The optimizer `config` names: Adam for real runs; plain SGD is what
    equivalence checks use (Adam hides loss-scaling errors)."""
    if config.optimizer == "sgd":
        optimizer = keras.optimizers.SGD(learning_rate=config.learning_rate)
    else:
        optimizer = keras.optimizers.Adam(learning_rate=config.learning_rate)
{%- if cookiecutter.mixed_precision == "float16" %}
    if config.mixed_precision:
        # float16 gradients underflow without loss scaling. Wrapped here, not by
        # compile(): this wrapper agrees across replicas (compat.py).
        optimizer = loss_scale_optimizer(optimizer)
{%- endif %}
    return optimizer
