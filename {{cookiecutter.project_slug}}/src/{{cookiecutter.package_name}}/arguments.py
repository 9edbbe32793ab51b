"""Command-line parsing that refuses a bad flag in one line: the parser and the
value types every command uses."""

import argparse
import math


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


def number_where(is_valid, description):
    """An argparse type: a number for which `is_valid` holds, or one line
    saying that the text is not `description`."""

    def parse(text):
        try:
            value = float(text)
        except ValueError:
            value = math.nan  # fails every comparison
        if not is_valid(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not {description}")
        return value

    return parse


fraction = number_where(lambda value: 0 <= value < 1, "a number from 0 to below 1")
positive_float = number_where(lambda value: value > 0, "a positive number")
{%- if cookiecutter.tracking == "mlflow" %}


def model_name(text):
    """An MLflow registered model's name: not empty, no '/' or ':' (MLflow refuses those)."""
    if not text.strip() or "/" in text or ":" in text:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an MLflow model name (not empty, no '/' or ':') - use a name"
            " such as my-classifier"
        )
    return text
{%- endif %}
