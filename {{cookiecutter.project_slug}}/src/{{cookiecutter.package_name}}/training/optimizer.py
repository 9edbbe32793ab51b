"""The training recipe: the optimizer and its learning rate, built by the
engines under `strategy.scope()` so their variables are mirrored on every replica.

The learning rate is given for a reference global batch and scaled to the
run's global batch once, where the plan is made: more replicas mean a larger
global batch and fewer steps, and the rate that worked on one GPU no longer
fits (Goyal et al. 2017: linear scaling and a gradual warmup). The schedule is a
function of the optimizer's own step counter, which every checkpoint holds, so a
resumed run continues the exact sequence.
"""

import math

import tensorflow as tf

from {{ cookiecutter.package_name }} import TrainerError
{% if cookiecutter.mixed_precision == "float16" -%}
from {{ cookiecutter.package_name }}.distribute.compat import keras, loss_scale_optimizer
{%- else -%}
from {{ cookiecutter.package_name }}.distribute.compat import keras
{%- endif %}
from {{ cookiecutter.package_name }}.training.lamb import Lamb, is_layer_weight

# Of the run's optimizer steps, the share spent warming up when --warmup-steps
# is not given.
DEFAULT_WARMUP_SHARE = 0.05
# The step schedule multiplies the rate by STEP_FACTOR at each of these shares
# of the steps after warmup.
STEP_BOUNDARIES = (1 / 3, 2 / 3)
STEP_FACTOR = 0.1


# The scaling rule when --learning-rate-scaling is not given: the one under which
# the optimizer trains alike at any batch. Linear for SGD (Goyal et al. 2017); the
# square root for Adam and AdamW (Malladi et al. 2022) and LAMB (You et al. 2019):
# the linear rule gives Adam 16x the rate at 16x the batch, where it trains worse
# (make bench).
SCALING_BY_OPTIMIZER = {"sgd": "linear", "adam": "sqrt", "adamw": "sqrt", "lamb": "sqrt"}
# The optimizers whose weight decay is their own, not a loss term.
DECAYING = ("adamw", "lamb")


# From this many times --reference-batch-size, a run of an adaptive optimizer
# logs what the template's recipe study measured (make bench, tabular task, 3
# seeds): at 16x, the same epochs left Adam 0.040 short of its held-out accuracy
# at 1x, LAMB at its best 0.029, a longer warmup no better; 4 times the epochs
# (a quarter of 1x's updates) held Adam within 0.004. SGD on its linear rule held.
LARGE_BATCH_FACTOR = 8


def large_batch_note(config, global_batch_size):
    """The study's finding, for a run of Adam, AdamW or LAMB at LARGE_BATCH_FACTOR
    times the reference batch or more (None otherwise), with the epochs that
    held it: the square root of the factor times as many (4x at 16x)."""
    factor = global_batch_size / config.reference_batch_size
    if config.optimizer == "sgd" or factor < LARGE_BATCH_FACTOR:
        return None
    epochs = math.ceil(config.epochs * math.sqrt(factor))
    return (
        f"the global batch {global_batch_size} is {factor:g}x --reference-batch-size"
        f" {config.reference_batch_size}: the same epochs are {factor:g}x fewer updates, which"
        " at 16x cost Adam and LAMB held-out accuracy in the template's study (a longer"
        " warmup did not help) while 4 times the epochs held Adam's - consider --epochs"
        f' {epochs}, sqrt({factor:g}) times as many (docs/training.md, "The training recipe")'
    )


def scaling_rule(config):
    """The rule that scales `config`'s learning rate: the one given, or the
    optimizer's own (SCALING_BY_OPTIMIZER)."""
    return config.learning_rate_scaling or SCALING_BY_OPTIMIZER[config.optimizer]


def scaled_learning_rate(config, global_batch_size):
    """`config.learning_rate`, given for a global batch of
    `config.reference_batch_size`, scaled to `global_batch_size`."""
    ratio = global_batch_size / config.reference_batch_size
    factor = {"linear": ratio, "sqrt": math.sqrt(ratio), "none": 1.0}[scaling_rule(config)]
    return config.learning_rate * factor


def describe_scaling(config, global_batch_size):
    """How the run's rate came from --learning-rate, for the log."""
    rule = scaling_rule(config)
    if rule == "none":
        return f"--learning-rate as given, not scaled to the global batch {global_batch_size}"
    why = "" if config.learning_rate_scaling else f", {config.optimizer}'s rule"
    return (
        f"{config.learning_rate:g} at batch {config.reference_batch_size} scaled to the global"
        f" batch {global_batch_size} by {rule}{why}"
    )


def warmup_steps(config, total_steps):
    if config.warmup_steps is not None:
        return config.warmup_steps
    return round(DEFAULT_WARMUP_SHARE * total_steps)


@keras.saving.register_keras_serializable(package="{{ cookiecutter.package_name }}")
class WarmupThenDecay(keras.optimizers.schedules.LearningRateSchedule):
    """A linear warmup from `peak / warmup_steps` to `peak`, then `decay` until
    `total_steps`: constant, cosine (to 0 after the last step), or step (x0.1 at
    a third and at two thirds of the steps after warmup)."""

    def __init__(self, peak, warmup_steps, total_steps, decay):
        self.peak = peak
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps
        self.decay = decay

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        # Optimizer step 0 is the first update: it gets 1/warmup_steps of the peak.
        warmup = tf.minimum((step + 1.0) / max(self.warmup_steps, 1), 1.0)
        decaying = max(self.total_steps - self.warmup_steps, 1)
        progress = tf.clip_by_value((step - self.warmup_steps) / decaying, 0.0, 1.0)
        if self.decay == "cosine":
            factor = 0.5 * (1.0 + tf.cos(math.pi * progress))
        elif self.decay == "step":
            passed = tf.add_n([tf.cast(progress >= share, tf.float32) for share in STEP_BOUNDARIES])
            factor = STEP_FACTOR**passed
        else:
            factor = tf.constant(1.0)
        return self.peak * warmup * factor

    def get_config(self):
        return {
            "peak": self.peak,
            "warmup_steps": self.warmup_steps,
            "total_steps": self.total_steps,
            "decay": self.decay,
        }

    def describe(self):
        ends = {
            "constant": "then constant",
            "cosine": f"then cosine to 0 at step {self.total_steps}",
            "step": "then x0.1 at a third and at two thirds of the rest",
        }
        return f"warmup {self.warmup_steps} steps, {ends[self.decay]}"


def learning_rate_schedule(config, global_batch_size, total_steps):
    """The run's learning rate by optimizer step: scaled to the global batch,
    warmed up, then decayed over the run's `total_steps`."""
    peak = scaled_learning_rate(config, global_batch_size)
    return WarmupThenDecay(peak, warmup_steps(config, total_steps), total_steps, config.lr_schedule)


def undecayed_variables(model):
    """Biases and normalization scales and offsets (every variable of rank 0 or
    1): decaying them towards 0 only hurts (Loshchilov and Hutter; Goyal et al.)."""
    return [variable for variable in model.trainable_variables if not is_layer_weight(variable)]


def make_optimizer(config, learning_rate, model):
    """The optimizer `config` names, on `learning_rate` (a schedule), for
    `model`'s variables: Adam; AdamW, whose decoupled weight decay leaves out
    `undecayed_variables`; LAMB (training/lamb.py: AdamW's step scaled layer by layer);
    or SGD with momentum (plain SGD, momentum 0, is what equivalence checks use:
    Adam hides loss-scaling errors)."""
    # --ema-decay: the optimizer keeps the averages (its variables: mirrored,
    # updated after each update, saved in every checkpoint).
    averaging = {"use_ema": config.ema_decay is not None, "ema_momentum": config.ema_decay or 0.99}
    if config.optimizer in DECAYING and config.weight_decay and model.losses:
        raise TrainerError(
            f"the model adds {len(model.losses)} regularization loss(es) (kernel_regularizer,"
            f" activity_regularizer) and --optimizer {config.optimizer} decays the weights too"
            " - remove the regularizers from task.build_model, give --weight-decay 0 (the"
            " model's own regularization then stands in), or use --optimizer adam or sgd"
        )
    if config.optimizer == "sgd":
        optimizer = keras.optimizers.SGD(
            learning_rate=learning_rate,
            momentum=config.momentum,
            nesterov=config.nesterov,
            **averaging,
        )
    elif config.optimizer == "adamw":
        optimizer = keras.optimizers.AdamW(
            learning_rate=learning_rate, weight_decay=config.weight_decay, **averaging
        )
        optimizer.exclude_from_weight_decay(var_list=undecayed_variables(model))
    elif config.optimizer == "lamb":
        optimizer = Lamb(
            learning_rate=learning_rate, weight_decay_rate=config.weight_decay, **averaging
        )
    else:
        optimizer = keras.optimizers.Adam(learning_rate=learning_rate, **averaging)
{%- if cookiecutter.mixed_precision == "float16" %}
    if config.mixed_precision:
        # float16 gradients underflow without loss scaling. Wrapped here, not by
        # compile(): this wrapper agrees across replicas (distribute/compat.py).
        optimizer = loss_scale_optimizer(optimizer)
{%- endif %}
    return optimizer


def weight_averages(optimizer):
    """The moving averages of the weights an optimizer with use_ema keeps, in the
    order of the variables it was built with (a private list in Keras 3 and
    tf_keras alike: tests/test_recipe.py notices the day it changes)."""
    return getattr(optimizer, "inner_optimizer", optimizer)._model_variables_moving_average


class AveragedWeights:
    """--ema-decay: the optimizer's moving averages of `model`'s weights, swapped
    into the model for an evaluation and back out after it, so that training
    goes on from the weights themselves. Every replica holds the same weights
    and averages, so the swap is one assignment of each (cross-replica)."""

    def __init__(self, model, optimizer):
        averages = weight_averages(optimizer)
        self.pairs = list(zip(model.trainable_variables, averages, strict=True))

    @tf.function
    def swap(self):
        for weight, average in self.pairs:
            held = tf.identity(weight)
            weight.assign(average)
            average.assign(held)

    def around(self, evaluate):
        """`evaluate`, run on the averages."""

        def evaluate_averages():
            self.swap()
            try:
                return evaluate()
            finally:
                self.swap()

        return evaluate_averages
