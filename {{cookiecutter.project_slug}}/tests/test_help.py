"""Every command's --help: the first thing a user types prints and exits 0, in
every project (argparse formats help text with %, so one stray % crashes it)."""

import contextlib
import io

import pytest

from {{ cookiecutter.package_name }}.cli import build_parser


def subcommands():
    (commands,) = [action for action in build_parser()._actions if action.dest == "command"]
    return sorted(commands.choices)


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
