"""Jinja helpers for the template: quoting filters and the hooks' location.

Cookiecutter loads this module through "_extensions" in cookiecutter.json.
"""

from pathlib import Path

from jinja2.ext import Extension

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


class TemplateFilters(Extension):
    def __init__(self, environment):
        super().__init__(environment)
        environment.filters["toml_escape"] = toml_escape
        environment.globals["template_hooks_dir"] = HOOKS_DIR
