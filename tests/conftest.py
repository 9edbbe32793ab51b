"""Shared by the template tests: the option combinations and bake helpers."""

import itertools
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "hooks"))

import rules  # noqa: E402

CONTEXT = json.loads((ROOT / "cookiecutter.json").read_text(encoding="utf-8"))
DEFAULTS = {
    key: (value[0] if isinstance(value, list) else value)
    for key, value in CONTEXT.items()
    if not key.startswith("_")
}


def code_combinations():
    """Every combination of the options that change the generated code."""
    names = rules.CODE_OPTIONS
    for values in itertools.product(*(rules.CHOICES[name] for name in names)):
        yield dict(zip(names, values, strict=True))


def combination_id(options):
    return "-".join(str(value) for value in options.values())


def bake(cookies, **options):
    """Bake the template (not whatever directory pytest runs in)."""
    return cookies.bake(extra_context=options, template=str(ROOT))


def hook_error(capfd):
    """The hook's stderr (pytest-cookies loses it: pytest-cookies#49)."""
    return capfd.readouterr().err


def leftovers(tmp_path):
    """Files and directories a bake left in the cookies output directories."""
    return sorted(p for p in (tmp_path / "cookies").rglob("*"))
