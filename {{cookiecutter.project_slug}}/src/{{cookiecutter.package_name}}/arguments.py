"""Command-line parsing that refuses a bad flag in one line: the parser and the
value types every command uses."""

import argparse


class ArgumentParser(argparse.ArgumentParser):
    """Bad flags give one `error:` line (not argparse's usage block) and exit 2."""

    def error(self, message):
        self.exit(2, f"error: {message} - run '{self.prog} --help' for usage\n")


def add_subcommand(commands, common, name, handler, text):
    """A subcommand `name` that takes the `common` flags and runs `handler(args)`."""
    command = commands.add_parser(name, parents=[common], help=text)
    command.set_defaults(handler=handler)
    return command


def positive_int(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1 or str(value) != text.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return value


def fraction(text):
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number from 0 to below 1")
    return value


def positive_float(text):
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number")
    return value
