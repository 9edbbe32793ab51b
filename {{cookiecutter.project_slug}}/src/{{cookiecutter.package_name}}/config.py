"""Training settings: defaults, a TOML config file, and command-line overrides.

Config file keys are the command-line flag names with underscores
(`--per-replica-batch-size` -> `per_replica_batch_size`); flags override the file.
"""

import dataclasses
import math
import tomllib
import types
from pathlib import Path

from {{ cookiecutter.package_name }} import TrainerError


class ConfigError(TrainerError):
    pass


OPTIMIZERS = ("adam", "adamw", "lamb", "sgd")
SCALING_RULES = ("linear", "sqrt", "none")
SCHEDULES = ("cosine", "step", "constant")
{%- if cookiecutter.training_loop == "both" %}
LOOPS = ("fit", "custom")
{%- endif %}


def setting(default, description, choices=None, commands=("train", "doctor")):
    """A training setting: its default, its flag's help, the values it takes
    (None: any of its type) and the commands that take it as a flag."""
    return dataclasses.field(
        default=default, metadata={"help": description, "choices": choices, "commands": commands}
    )


@dataclasses.dataclass
class TrainConfig:
    """Every training setting, declared once. The config file's keys, the flags
    of `train` and `doctor` (cli.add_config_flags) and their help come from
    here; tests/test_config.py checks configs/default.toml and docs/flags.md's flag
    table against it."""

    epochs: int = setting(3, "epochs to train")
    steps_per_epoch: int | None = setting(None, "steps per epoch (default: one pass over the data)")
    per_replica_batch_size: int = setting(
        {{ cookiecutter.per_replica_batch_size | int }}, "batch per replica; the global batch is this times the replicas"
    )
    accumulate_steps: int = setting(
        1,
        "micro-batches of --per-replica-batch-size per optimizer update: the global batch"
        " is this times the per-replica batch times the replicas",
    )
    # The rate for a reference global batch, scaled to the run's (training/optimizer.py).
    learning_rate: float = setting(
        0.01, "the peak learning rate for a global batch of --reference-batch-size"
    )
    reference_batch_size: int = setting(256, "the global batch --learning-rate is given for")
    # Adaptive optimizers keep their behaviour under a square-root rule (Malladi
    # et al. 2022), SGD under the linear one (Goyal et al. 2017): training/optimizer.py.
    learning_rate_scaling: str | None = setting(
        None,
        "the rate times (global batch / reference batch) (linear), its square root (sqrt),"
        " or 1 (default: sqrt for adam, adamw and lamb, linear for sgd)",
        choices=SCALING_RULES,
    )
    warmup_steps: int | None = setting(
        None, "optimizer steps of linear warmup (default: the first 5% of the run's steps)"
    )
    lr_schedule: str = setting(
        "cosine", "the learning rate after warmup, to the run's last step", choices=SCHEDULES
    )
    optimizer: str = setting("adam", "the optimizer", choices=OPTIMIZERS)
    momentum: float = setting(0.9, "SGD's momentum (--optimizer sgd; 0 for plain SGD)")
    nesterov: bool = setting(False, "Nesterov momentum (--optimizer sgd)")
    weight_decay: float = setting(
        0.01, "AdamW's and LAMB's weight decay (not on biases and normalization layers)"
    )
    clip_norm: float | None = setting(
        None, "clip the all-reduced gradient to this global norm (default: no clipping)"
    )
    ema_decay: float | None = setting(
        None,
        "keep an exponential moving average of the weights with this decay (e.g. 0.999):"
        " evaluation, the final model and the export use it (default: off)",
    )
    seed: int = setting(42, "shuffling and initial weights")
    resume_with_changes: bool = setting(
        False,
        "resume the run in --model-dir even though settings that define it changed (the"
        " optimizer, the learning rate and its schedule, the seed, ...)",
        commands=("train",),
    )
    model_dir: str = setting(
        "runs/latest", "checkpoints, logs and the final model", commands=("train",)
    )
    summary_json: str | None = setting(
        None, "write the run's summary (one JSON object) here", commands=("train",)
    )
    profile_steps: str | None = setting(
        None,
        "A:B: a TensorBoard profile of the calls that run global steps A to B (in"
        " MODEL_DIR/logs, from the chief)",
        commands=("train",),
    )
    # A blow-up that a batch causes comes back when its batches are replayed, so
    # a recovery skips them (as PaLM's training did); off by default: it trains
    # on less data, which a run should ask for.
    recovery_trials: int = setting(
        0,
        "on a loss blow-up (NaN, Inf, or above --loss-upper-bound), roll back to the last"
        " checkpoint and skip the steps since it, at most N times in the run (default 0: stop)",
    )
    loss_upper_bound: float | None = setting(
        None, "a training loss above this is a blow-up, as a NaN is (default: no bound)"
    )
    # Save every N global steps (and at every epoch end): at 0.1-0.3 s per step
    # on a GPU, 1000 steps is a checkpoint every 2-5 minutes.
    checkpoint_every: int = setting(
        1000, "save a checkpoint every N global steps, and at every epoch end"
    )
    # Training steps run per tf.function call: the host reads the loss once per
    # call, and a SIGTERM waits for the running call. 100: within 2-3% of the
    # per-call overhead's bound on a small model (make bench); 20-30 s a call at
    # 0.2-0.3 s a step, inside the 120 s the cluster files give before the kill.
    steps_per_call: int = setting(100, "training steps per tf.function call")
    # A collective waits for every replica without a time limit: a stopped worker
    # or input pipeline would hold the job's GPUs forever (training/watchdog.py).
    stall_timeout: int = setting(
        600,
        "exit 142 (the job restarts from the last checkpoint) when a call, save or"
        " evaluation makes no progress for this many seconds (more for slow ones)",
        commands=("train",),
    )
    # Only the trainer knows whether a restart moved the run on (training/attempts.py).
    no_progress_attempts: int = setting(
        3,
        "stop the run (exit 1, which no launcher restarts) when the last N attempts"
        " all started from the checkpoint this one starts from (at most 100)",
        commands=("train",),
    )
    deterministic: bool = setting(
        False,
        "deterministic kernels: bit-identical reruns, resumes and replica copies (slower on GPUs)",
    )
{%- if cookiecutter.training_loop != "fit" %}
    # Each replica's forward and backward pass; the all-reduce stays outside XLA.
    jit_compile: bool = setting(False, "XLA-compile the replica step (custom loop)")
{%- endif %}
{%- if cookiecutter.distribution == "mirrored" %}
    cpu_replicas: int | None = setting(
        None, "CPU-only machines: split the CPU into N logical devices, one replica each"
    )
{%- endif %}
{%- if cookiecutter.mixed_precision != "no" %}
    # False gives float32 (what equivalence checks use).
    mixed_precision: bool = setting(True, "mixed_{{ cookiecutter.mixed_precision }} compute")
{%- endif %}
{%- if cookiecutter.data_source == "tfrecord" %}
    data_dir: str = setting("data", "directory of the train-* and eval-* shards and their manifest")
{%- endif %}
{%- if cookiecutter.data_source == "tfrecord" %}
    # 1 for 1-based labels (ImageNet conversions, many CSV exports).
    label_offset: int = setting(0, "subtracted from the stored labels: 1 for 1-based labels")
{%- endif %}
{%- if cookiecutter.training_loop == "both" %}
    loop: str = setting("fit", "which training loop", choices=LOOPS)
{%- endif %}
{%- if cookiecutter.tracking == "mlflow" %}
    tracking_uri: str | None = setting(
        None,
        "the MLflow tracking server or store (default: $MLFLOW_TRACKING_URI, else"
        " sqlite:///mlflow.db in the working directory)",
        commands=("train",),
    )
    experiment: str | None = setting(
        None,
        "the MLflow experiment (default: $MLFLOW_EXPERIMENT_NAME, else {{ cookiecutter.project_slug }})",
        commands=("train",),
    )
{%- endif %}

    def __post_init__(self):
        self.validate()

    def validate(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is None and isinstance(field.type, types.UnionType):
                continue
            _check_type(field.name, value, value_type(field))
            if field.name in POSITIVE_FIELDS and value < 1:
                raise ConfigError(f"{field.name}={value} must be at least 1 - use 1 or more")
            choices = field.metadata["choices"]
            if choices and value not in choices:
                raise ConfigError(
                    f"{field.name}={value!r} is not supported - use one of: " + ", ".join(choices)
                )
{%- if cookiecutter.data_source == "tfrecord" %}
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
        if self.warmup_steps is not None and self.warmup_steps < 0:
            raise ConfigError(
                f"warmup_steps={self.warmup_steps} must not be negative - use 0 for no warmup"
            )
        if self.profile_steps is not None and profile_window(self.profile_steps) is None:
            raise ConfigError(
                f"profile_steps={self.profile_steps!r} is not A:B with 1 <= A <= B - e.g."
                " 100:110 profiles global steps 100 to 110"
            )
        if self.clip_norm is not None and not self.clip_norm > 0:
            raise ConfigError(
                f"clip_norm={self.clip_norm} must be positive - use a value such as 1.0, or"
                " leave it out for no clipping"
            )
{%- if cookiecutter.mixed_precision == "float16" %}
        if self.clip_norm is not None and self.mixed_precision:
            raise ConfigError(
                "clip_norm with mixed_float16 is not supported: the loss-scale optimizer"
                " applies its own unscaled gradients - use --no-mixed-precision, or bake"
                " with mixed_precision=bfloat16 (no loss scaling)"
            )
{%- endif %}
        if self.no_progress_attempts > MAX_NO_PROGRESS_ATTEMPTS:
            raise ConfigError(
                f"no_progress_attempts={self.no_progress_attempts} is more than the"
                f" {MAX_NO_PROGRESS_ATTEMPTS} attempts the run keeps - use"
                f" {MAX_NO_PROGRESS_ATTEMPTS} or fewer"
            )
        if self.recovery_trials < 0:
            raise ConfigError(
                f"recovery_trials={self.recovery_trials} must not be negative - use 0 to stop"
                " at a blow-up, or N to recover up to N times"
            )
        if self.loss_upper_bound is not None and not math.isfinite(self.loss_upper_bound):
            raise ConfigError(
                f"loss_upper_bound={self.loss_upper_bound} must be a finite number - e.g. 10"
                " for a loss that starts near 1, or leave it out for no bound"
            )
        if self.ema_decay is not None and not 0 < self.ema_decay < 1:
            raise ConfigError(
                f"ema_decay={self.ema_decay} is out of range - use a value between 0 and 1,"
                " such as 0.999, or leave it out for no averaging"
            )
        for name in FRACTION_FIELDS:
            if not 0 <= getattr(self, name) < 1:
                raise ConfigError(
                    f"{name}={getattr(self, name)} is out of range - use a value from 0 to"
                    " below 1, such as 0.9 for momentum or 0.01 for weight decay"
                )
{%- if cookiecutter.tracking == "mlflow" %}
        if self.tracking_uri and not is_tracking_uri(self.tracking_uri):
            raise ConfigError(bad_tracking_uri("tracking_uri", self.tracking_uri))
{%- endif %}
{%- if cookiecutter.training_loop == "both" %}
        if self.jit_compile and self.loop == "fit":
            raise ConfigError(
                "jit_compile works with the custom loop only: Keras turns XLA off under"
                " tf.distribute, and compiling train_step fails on several replicas"
                " (keras-team/keras#19005) - use --loop custom, or leave out --jit-compile"
            )
{%- endif %}


# TensorFlow's seeds are below 2**31 - 1, and seed 0 uses 2**31 - 2 (training/assembly.py).
MAX_SEED = 2**31 - 3
{%- if cookiecutter.tracking == "mlflow" %}
# The stores MLflow's tracking client takes (a plain file store is refused by MLflow 3.13+).
TRACKING_SCHEMES = ("http", "https", "sqlite", "postgresql", "mysql", "mssql", "databricks")
{%- endif %}
# How each type is written in the config file, for the wrong-type message.
TOML_EXAMPLES = {int: "e.g. 3", float: "e.g. 0.01", str: 'e.g. "text"', bool: "true or false"}
# The attempts the run keeps in attempts.json (attempts.KEEP_ATTEMPTS).
MAX_NO_PROGRESS_ATTEMPTS = 100
# Settings from 0 to below 1.
FRACTION_FIELDS = ("momentum", "weight_decay")
POSITIVE_FIELDS = (
    "epochs",
    "steps_per_epoch",
    "per_replica_batch_size",
    "accumulate_steps",
    "reference_batch_size",
    "checkpoint_every",
    "steps_per_call",
    "stall_timeout",
    "no_progress_attempts",
{%- if cookiecutter.distribution == "mirrored" %}
    "cpu_replicas",
{%- endif %}
)
{%- if cookiecutter.tracking == "mlflow" %}


def is_tracking_uri(uri):
    """Whether MLflow's tracking client takes `uri` (its scheme, less a driver:
    postgresql+psycopg2:// is postgresql)."""
    scheme, separator, _ = uri.partition("://")
    return bool(separator) and scheme.partition("+")[0] in TRACKING_SCHEMES


def bad_tracking_uri(name, uri):
    return (
        f"{name}={uri!r} is not an MLflow tracking URI - use http://HOST:PORT (or"
        " https://) for a tracking server, or sqlite:///PATH/mlflow.db for a local store"
    )
{%- endif %}


def profile_window(text):
    """'A:B' -> (A, B) with 1 <= A <= B; None for any other text."""
    first, _, last = text.partition(":")
    if not (first.isdigit() and last.isdigit() and 1 <= int(first) <= int(last)):
        return None
    return int(first), int(last)


def value_type(field):
    """A setting's type without its None: `int | None` -> int."""
    if isinstance(field.type, types.UnionType):
        return next(arg for arg in field.type.__args__ if arg is not type(None))
    return field.type


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
