"""The commands' flags: every command's --help (the first thing a user types)
prints and exits 0 (argparse formats help text with %, so one stray % crashes
it), and the doctor takes any train command line."""

import contextlib
import io

import pytest

from {{ cookiecutter.package_name }}.cli import build_parser


def command_parsers():
    (commands,) = [action for action in build_parser()._actions if action.dest == "command"]
    return commands.choices


def subcommands():
    return sorted(command_parsers())


def test_every_command_is_listed():
    assert {"train", "doctor", "export", "gpu-smoke"} <= set(subcommands())


@pytest.mark.parametrize("command", subcommands())
def test_help_of_every_command_prints_and_exits_0(command):
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), pytest.raises(SystemExit) as exited:
        build_parser().parse_args([command, "--help"])
    assert exited.value.code == 0
    assert printed.getvalue().startswith("usage: ")
    assert f" {command} " in printed.getvalue().splitlines()[0]


def flags_of(command):
    parser = command_parsers()[command]
    return {option for action in parser._actions for option in action.option_strings}


def test_the_doctor_takes_every_train_flag():
    assert flags_of("train") <= flags_of("doctor")
    args = build_parser().parse_args(
        ["doctor", "--model-dir", "runs/x", "--summary-json", "s.json", "--epochs", "2"]
    )
    assert (args.model_dir, args.epochs) == ("runs/x", 2)
