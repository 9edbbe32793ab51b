import argparse
import dataclasses
import re
import tomllib
from pathlib import Path

import pytest

from {{ cookiecutter.package_name }}.cli import build_parser
from {{ cookiecutter.package_name }}.config import ConfigError, TrainConfig, load_config

PROJECT = Path(__file__).resolve().parents[1]


def write(tmp_path, text):
    path = tmp_path / "train.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_carry_the_chosen_batch_size():
    assert TrainConfig().per_replica_batch_size == {{ cookiecutter.per_replica_batch_size | int }}


def test_shipped_config_file_loads():
    config = load_config(PROJECT / "configs" / "default.toml")
    assert config.per_replica_batch_size == {{ cookiecutter.per_replica_batch_size | int }}


def test_the_shipped_config_file_holds_the_defaults():
    values = tomllib.loads((PROJECT / "configs" / "default.toml").read_text(encoding="utf-8"))
    defaults = {field.name: field.default for field in dataclasses.fields(TrainConfig)}
    assert values == {key: defaults[key] for key in values}


def test_the_flag_reference_lists_every_flag_of_train_help():
    """docs/flags.md, the flags' reference, has a row for each flag `train --help`
    prints (from TrainConfig), and no other."""
    page = (PROJECT / "docs" / "flags.md").read_text(encoding="utf-8")
    table = page[page.index("| flag | meaning |") :]
    table = table[: table.index("\n\n")]
    (commands,) = [action for action in build_parser()._actions if action.dest == "command"]
    train = commands.choices["train"]
    shown = [action for action in train._actions if action.help != argparse.SUPPRESS]
    options = {option for action in shown for option in action.option_strings}
    # A switch's --no-X is the row of its --X (--no-progress-attempts N is a flag of its own).
    helped = {
        option
        for option in options - {"-h", "--help"}
        if not (option.startswith("--no-") and "--" + option[5:] in options)
    }
    rows = re.findall(r"^\| `(--[a-z0-9-]+)", table, re.MULTILINE)
    assert sorted(rows) == sorted(helped)


def test_flags_override_the_file(tmp_path):
    path = write(tmp_path, "epochs = 5\nlearning_rate = 0.5\nseed = 3\n")
    config = load_config(path, {"epochs": 7, "seed": None})
    assert (config.epochs, config.learning_rate, config.seed) == (7, 0.5, 3)


def test_unknown_key_is_refused(tmp_path):
    path = write(tmp_path, "epoch = 5\n")
    with pytest.raises(ConfigError, match=r"unknown key 'epoch' - valid keys are: epochs"):
        load_config(path)


@pytest.mark.parametrize(
    "line, message",
    [
        ('epochs = "three"', r"epochs='three' has the wrong type - expected int"),
        ("epochs = true", r"epochs=True has the wrong type - expected int"),
        ('learning_rate = "fast"', r"learning_rate='fast' has the wrong type - expected float"),
        ("epochs = 0", r"epochs=0 must be at least 1"),
        ("steps_per_epoch = -2", r"steps_per_epoch=-2 must be at least 1"),
        ("seed = -1", r"seed=-1 is out of range - use a whole number from 0 to 2147483645"),
        ("seed = 2147483646", r"seed=2147483646 is out of range"),
        ("warmup_steps = -1", r"warmup_steps=-1 must not be negative - use 0 for no warmup"),
        ("momentum = 1.0", r"momentum=1.0 is out of range - use a value from 0 to below 1"),
        ('lr_schedule = "linear"', r"lr_schedule='linear' is not supported - use one of: cosine"),
        ("clip_norm = 0.0", r"clip_norm=0.0 must be positive - use a value such as 1.0"),
        ('profile_steps = "9:3"', r"profile_steps='9:3' is not A:B with 1 <= A <= B - e.g."),
        ("accumulate_steps = 0", r"accumulate_steps=0 must be at least 1"),
        ("ema_decay = 1.0", r"ema_decay=1.0 is out of range - use a value between 0 and 1"),
        ("recovery_trials = -1", r"recovery_trials=-1 must not be negative - use 0 to stop"),
        ("loss_upper_bound = inf", r"loss_upper_bound=inf must be a finite number - e.g. 10"),
{%- if cookiecutter.mixed_precision == "float16" %}
        ("clip_norm = 1.0", r"clip_norm with mixed_float16 is not supported: .* --no-mixed"),
{%- endif %}
        (
            'optimizer = "lars"',
            r"optimizer='lars' is not supported - use one of: adam, adamw, lamb, sgd",
        ),
{%- if cookiecutter.task == "tabular" and cookiecutter.training_loop == "both" %}
        (
            'loop = "fit"\njit_compile = true',
            r"jit_compile works with the custom loop only: .* \(keras-team/keras#19005\)",
        ),
{%- endif %}
    ],
)
def test_bad_values_are_refused_naming_the_key(tmp_path, line, message):
    path = write(tmp_path, line + "\n")
    with pytest.raises(ConfigError, match=message) as caught:
        load_config(path)
    assert str(path) in str(caught.value)
    assert "\n" not in str(caught.value)


def test_invalid_toml_is_refused(tmp_path):
    path = write(tmp_path, "epochs = \n")
    with pytest.raises(ConfigError, match="is not valid TOML"):
        load_config(path)


def test_missing_file_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml")
