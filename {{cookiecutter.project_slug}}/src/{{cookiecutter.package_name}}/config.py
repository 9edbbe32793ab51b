"""Training settings: defaults, a TOML config file, and command-line overrides.

Config file keys are the command-line flag names with underscores
(`--per-replica-batch-size` -> `per_replica_batch_size`); flags override the file.
"""

import dataclasses
import tomllib
import types
from pathlib import Path

from {{ cookiecutter.package_name }} import TrainerError


class ConfigError(TrainerError):
    pass


@dataclasses.dataclass
class TrainConfig:
    epochs: int = 3
    # None: one pass over the training data per epoch.
    steps_per_epoch: int | None = None
    per_replica_batch_size: int = {{ cookiecutter.per_replica_batch_size | int }}
    learning_rate: float = 0.01
    optimizer: str = "adam"
    seed: int = 42
    model_dir: str = "runs/latest"
    summary_json: str | None = None
    # Save every N global steps (and at every epoch end): at 0.1-0.3 s per step
    # on a GPU, 1000 steps is a checkpoint every 2-5 minutes.
    checkpoint_every: int = 1000
    # Training steps run per tf.function call: the host reads the loss once per
    # call, and a SIGTERM waits for the running call. 100: within 2-3% of the
    # per-call overhead's bound on a small model (make bench); 20-30 s a call at
    # 0.2-0.3 s a step, inside the 120 s the cluster files give before the kill.
    steps_per_call: int = 100
    # Deterministic GPU kernels: bit-identical reruns and resumes on GPUs too.
    deterministic: bool = False
{%- if cookiecutter.task == "tabular" and cookiecutter.training_loop != "fit" %}
    # XLA-compile each replica's forward and backward pass (custom loop).
    jit_compile: bool = False
{%- endif %}
{%- if cookiecutter.distribution == "mirrored" %}
    # Logical CPU devices to split the CPU into (CPU-only machines; None: no split).
    cpu_replicas: int | None = None
{%- endif %}
{%- if cookiecutter.mixed_precision != "no" %}
    # mixed_{{ cookiecutter.mixed_precision }} compute; false gives float32 (what equivalence checks use).
    mixed_precision: bool = True
{%- endif %}
{%- if cookiecutter.data_source == "tfrecord" %}
    data_dir: str = "data"
{%- endif %}
{%- if cookiecutter.task == "image" and cookiecutter.data_source == "tfrecord" %}
    # Subtracted from the stored labels: 1 for 1-based labels (ImageNet conversions).
    label_offset: int = 0
{%- endif %}
{%- if cookiecutter.training_loop == "both" %}
    loop: str = "fit"
{%- endif %}

    def __post_init__(self):
        self.validate()

    def validate(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            optional = isinstance(field.type, types.UnionType)
            if value is None and optional:
                continue
            expected = _base_type(field.type) if optional else field.type
            _check_type(field.name, value, expected)
            if field.name in POSITIVE_FIELDS and value < 1:
                raise ConfigError(f"{field.name}={value} must be at least 1 - use 1 or more")
{%- if cookiecutter.task == "image" and cookiecutter.data_source == "tfrecord" %}
        if self.label_offset < 0:
            raise ConfigError(
                f"label_offset={self.label_offset} must not be negative - use 0, or 1 for"
                " 1-based labels"
            )
{%- endif %}
        if not 0 <= self.seed <= MAX_SEED:
            raise ConfigError(
                f"seed={self.seed} is out of range - use a whole number from 0 to {MAX_SEED}"
            )
        if not self.learning_rate > 0:
            raise ConfigError(
                f"learning_rate={self.learning_rate} must be positive - use a value such as 0.01"
            )
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(
                f"optimizer={self.optimizer!r} is not supported - use one of: "
                + ", ".join(OPTIMIZERS)
            )
{%- if cookiecutter.training_loop == "both" %}
        if self.loop not in LOOPS:
            raise ConfigError(f"loop={self.loop!r} is not supported - use fit or custom")
{%- endif %}
{%- if cookiecutter.task == "tabular" and cookiecutter.training_loop == "both" %}
        if self.jit_compile and self.loop == "fit":
            raise ConfigError(
                "jit_compile works with the custom loop only: Keras turns XLA off under"
                " tf.distribute, and compiling train_step fails on several replicas"
                " (keras-team/keras#19005) - use --loop custom, or leave out --jit-compile"
            )
{%- endif %}


OPTIMIZERS = ("adam", "sgd")
# TensorFlow's seeds are below 2**31 - 1, and seed 0 uses 2**31 - 2 (training.py).
MAX_SEED = 2**31 - 3
# How each type is written in the config file, for the wrong-type message.
TOML_EXAMPLES = {int: "e.g. 3", float: "e.g. 0.01", str: 'e.g. "text"', bool: "true or false"}
POSITIVE_FIELDS = (
    "epochs",
    "steps_per_epoch",
    "per_replica_batch_size",
    "checkpoint_every",
    "steps_per_call",
{%- if cookiecutter.distribution == "mirrored" %}
    "cpu_replicas",
{%- endif %}
)
{%- if cookiecutter.training_loop == "both" %}
LOOPS = ("fit", "custom")
{%- endif %}


def _base_type(annotation):
    """`int | None` -> int."""
    return next(arg for arg in annotation.__args__ if arg is not type(None))


def _check_type(name, value, expected):
    # bool is an int subclass (true is no epoch count); an int is a fine float.
    if expected is bool:
        ok = isinstance(value, bool)
    elif expected is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    else:
        ok = isinstance(value, expected) and not isinstance(value, bool)
    if not ok:
        raise ConfigError(
            f"{name}={value!r} has the wrong type - expected {expected.__name__}"
            f" ({TOML_EXAMPLES[expected]})"
        )


FIELD_NAMES = tuple(field.name for field in dataclasses.fields(TrainConfig))


def read_config_file(path):
    """The settings in a TOML file, checked against TrainConfig's fields."""
    path = Path(path)
    try:
        with path.open("rb") as handle:
            values = tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist - check the path") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"config file {path} is not valid TOML ({err}) - fix it") from None
    unknown = sorted(set(values) - set(FIELD_NAMES))
    if unknown:
        raise ConfigError(
            f"config file {path}: unknown key {unknown[0]!r} - valid keys are: "
            + ", ".join(FIELD_NAMES)
        )
    return values


def load_config(path=None, overrides=None):
    """Defaults, then the config file at `path`, then `overrides` (None = unset)."""
    values = read_config_file(path) if path else {}
    values.update({k: v for k, v in (overrides or {}).items() if v is not None})
    try:
        return TrainConfig(**values)
    except ConfigError as err:
        where = f"config file {path}: " if path else ""
        raise ConfigError(f"{where}{err}") from None
