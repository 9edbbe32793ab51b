"""Shared by the template tests: the option combinations and bake helpers."""

import json
import sys
from pathlib import Path

import jinja2
import pytest
from cookiecutter.environment import StrictEnvironment

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "hooks"))

import rules  # noqa: E402

CONTEXT = json.loads((ROOT / "cookiecutter.json").read_text(encoding="utf-8"))
DEFAULTS = {
    key: (value[0] if isinstance(value, list) else value)
    for key, value in CONTEXT.items()
    if not key.startswith("_")
}


code_combinations = rules.code_combinations


class CompiledTemplates(jinja2.BytecodeCache):
    """Jinja's compiled templates, kept in memory for the test process: each
    bake makes a new environment, and compiling the template's files again is
    most of a bake's time (checked against each file's source, so an edit is
    compiled afresh)."""

    def __init__(self):
        self.compiled = {}

    def load_bytecode(self, bucket):
        if bucket.key in self.compiled:
            bucket.bytecode_from_string(self.compiled[bucket.key])

    def dump_bytecode(self, bucket):
        self.compiled[bucket.key] = bucket.bytecode_to_string()


COMPILED_TEMPLATES = CompiledTemplates()
_new_environment = StrictEnvironment.__init__


def _environment_with_compiled_templates(self, **kwargs):
    _new_environment(self, **kwargs)
    self.bytecode_cache = COMPILED_TEMPLATES


StrictEnvironment.__init__ = _environment_with_compiled_templates


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


def pytest_addoption(parser):
    parser.addoption(
        "--slow-shard",
        metavar="K/N",
        help="run only the K-th of N shares of the slow tier (CI jobs in parallel)",
    )


def parse_shard(text):
    """'K/N' -> (K, N), 1 <= K <= N; a pytest usage error naming the value otherwise."""
    k, _, n = text.partition("/")
    if not (k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
        raise pytest.UsageError(
            f"--slow-shard {text!r} is not K/N with 1 <= K <= N - e.g. --slow-shard 1/4"
        )
    return int(k), int(n)


def shard_of(items, k, n):
    """The K-th of N shares, round robin: the heavy combinations (listed first)
    land in different shares."""
    return items[k - 1 :: n]


def pytest_collection_modifyitems(config, items):
    # The slow tier first (the baked projects lead it): the many short tests
    # after it fill the gaps, so the two test workers (make test) end together.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    text = config.getoption("--slow-shard")
    if text is None:
        return
    k, n = parse_shard(text)
    slow = [item for item in items if item.get_closest_marker("slow")]
    kept = set(shard_of(slow, k, n))
    deselected = [item for item in slow if item not in kept]
    config.hook.pytest_deselected(items=deselected)
    items[:] = [item for item in items if item not in deselected]
