"""Jinja set-up for the template: a sandbox, quoting filters, the hooks' location.

Cookiecutter loads this module through "_extensions" in cookiecutter.json.
"""

from pathlib import Path

from jinja2.exceptions import TemplateSyntaxError, UndefinedError
from jinja2.ext import Extension
from jinja2.sandbox import SandboxedEnvironment, safe_range

PLAIN_TEXT = "values are plain text: remove the {{ }} or {% %} from it"

# Resolved at import, while the working directory is still the caller's: the
# hooks run elsewhere and cookiecutter's own _repo_dir may be relative.
HOOKS_DIR = str(Path(__file__).resolve().parent / "hooks")


def toml_escape(value):
    """`value` escaped for the inside of a TOML basic string ("...").

    Templates write the quotes themselves, so the unrendered file stays valid
    TOML for the tools that read it in the template repository (ruff, pytest).
    """
    out = []
    for char in str(value):
        if char in '"\\':
            out.append("\\" + char)
        elif ord(char) < 32 or ord(char) == 127:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return "".join(out)


class Sandbox(SandboxedEnvironment):
    """Jinja's sandbox: templates (and the values users type, which cookiecutter
    renders as templates before any hook runs) cannot reach attributes that start
    with "_", so `{{ cycler.__init__.__globals__.os.system(...) }}` runs nothing."""

    def unsafe_undefined(self, obj, attribute):
        # An undefined value, not SecurityError: cookiecutter reports it as one
        # "Unable to render variable" error instead of a traceback.
        return self.undefined(
            f"{attribute!r} is not allowed in a value - {PLAIN_TEXT}", obj=obj, name=attribute
        )

    def from_string(self, source, *args, **kwargs):
        try:
            return super().from_string(source, *args, **kwargs)
        except TemplateSyntaxError as err:
            # Stray Jinja syntax in a typed value: reported like an unrenderable
            # value ("Unable to render variable ..."), not as a traceback.
            raise UndefinedError(
                f"{source!r} is not valid template syntax ({err.message}) - {PLAIN_TEXT}"
            ) from None


def sandbox(environment):
    """Turn cookiecutter's environment into a sandboxed one, in place."""
    environment.__class__ = type(
        f"Sandboxed{type(environment).__name__}", (Sandbox, type(environment)), {}
    )
    # What SandboxedEnvironment.__init__ sets up, which this environment skipped.
    environment.globals["range"] = safe_range
    environment.binop_table = dict(environment.default_binop_table)
    environment.unop_table = dict(environment.default_unop_table)


class TemplateFilters(Extension):
    def __init__(self, environment):
        super().__init__(environment)
        sandbox(environment)
        environment.filters["toml_escape"] = toml_escape
        environment.globals["template_hooks_dir"] = HOOKS_DIR
