"""Shared by the template tests: the option combinations and bake helpers."""

import json
import sys
from pathlib import Path

import pytest

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
    text = config.getoption("--slow-shard")
    if text is None:
        return
    k, n = parse_shard(text)
    slow = [item for item in items if item.get_closest_marker("slow")]
    kept = set(shard_of(slow, k, n))
    deselected = [item for item in slow if item not in kept]
    config.hook.pytest_deselected(items=deselected)
    items[:] = [item for item in items if item not in deselected]
