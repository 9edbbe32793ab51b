"""Property-based: whatever a user types for the free-text options either bakes a
project whose files all parse, or is refused plainly, leaving nothing behind.
Nothing a value holds is ever run."""

import ast
import json
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import pytest
import yaml
from conftest import ROOT
from cookiecutter.exceptions import FailedHookException, UndefinedVariableInTemplate
from cookiecutter.main import cookiecutter
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FIELDS = ("project_name", "description", "author_name", "author_email")
CANARY = Path(tempfile.gettempdir()) / "tf-distributed-trainer-canary"
RUN_CANARY = [
    f"{{{{ cycler.__init__.__globals__.os.system('touch {CANARY}') }}}}",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    f"$(touch {CANARY})",
    f"`touch {CANARY}`",
    f"\"; __import__('os').system('touch {CANARY}'); \"",
    f"'''; import os; os.system('touch {CANARY}') #",
]
PIECES = [
    *RUN_CANARY,
    *('"', "'", '"""', "'''", "\\", "\\n", "\\u0000", "\n", "\r\n", "\t", "\x00", "\x1b[31m"),
    *("{{", "}}", "{%", "%}", "{#", "{{ cookiecutter.project_name }}", "{% raw %}", "${HOME}"),
    *("/", "../", "..", "a/b", "C:\\Windows", "~", "-rf", "--help", "#", ";", "|", "&&"),
    *("é", "ß", "日本語", "🚀", "\u202e", "\ufeff", "\u00a0", "İ"),
    *("x" * 300, "1abc", "123", "con", "nul", "import", "class", "test", "keras", "os"),
    *("you@example.com", "a@b", "@", "x@y.z\n", "<a@b.c>"),
]
hostile = st.one_of(
    st.text(max_size=30),
    st.lists(st.sampled_from(PIECES), min_size=1, max_size=4).map("".join),
    st.tuples(st.text(max_size=8), st.sampled_from(PIECES), st.text(max_size=8)).map("".join),
)


def parse_every_file(project):
    """Parse every Python, TOML, YAML and JSON file; return how many were parsed."""
    parsed = 0
    for path in project.rglob("*"):
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".py":
            ast.parse(text, filename=str(path))
        elif path.suffix == ".toml":
            tomllib.loads(text)
        elif path.suffix in (".yml", ".yaml"):
            list(yaml.safe_load_all(text))
        elif path.suffix == ".json":
            json.loads(text)
        else:
            continue
        parsed += 1
    return parsed


def bake_value(field, value, output_dir, capfd):
    """('baked', project) or ('refused', message)."""
    try:
        project = cookiecutter(
            str(ROOT), no_input=True, output_dir=str(output_dir), extra_context={field: value}
        )
    except FailedHookException:
        return "refused", capfd.readouterr().err
    except UndefinedVariableInTemplate as err:  # cookiecutter's own refusal
        return "refused", str(err)
    return "baked", Path(project)


@pytest.fixture
def output_root(tmp_path):
    CANARY.unlink(missing_ok=True)
    yield tmp_path
    assert not CANARY.exists(), "a value was run"


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(field=st.sampled_from(FIELDS), value=hostile)
def test_any_value_bakes_parseable_files_or_is_refused(output_root, capfd, field, value):
    output_dir = Path(tempfile.mkdtemp(dir=output_root))
    try:
        outcome, result = bake_value(field, value, output_dir, capfd)
        if outcome == "refused":
            assert result.startswith("error: ") or "Unable to render variable" in result, result
            assert "\n" not in result.strip() or "Unable to render variable" in result
            assert not list(output_dir.iterdir()), "a refused bake left files behind"
        else:
            assert parse_every_file(result) >= 20
            pyproject = tomllib.loads((result / "pyproject.toml").read_text(encoding="utf-8"))
            if field == "description" and "{" not in value:
                assert pyproject["project"]["description"] == value
            if field == "author_name" and "{" not in value:
                assert pyproject["project"]["authors"][0]["name"] == value
        assert not CANARY.exists(), f"{field}={value!r} was run"
    finally:
        shutil.rmtree(output_dir, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.parametrize(
    "field, value",
    [
        ("project_name", "Ünïcode Trainer 日本語 \u202e"),
        ("description", "\"\"\" ''' \\ $(rm -rf /) `x` ${HOME} # ; && |"),
        ("author_name", "O'Brien \"the\" \\ Backslash"),
    ],
    ids=["unicode-name", "quotes-and-shell", "quotes-in-author"],
)
def test_baked_tests_collect_with_hostile_values(output_root, capfd, field, value):
    outcome, project = bake_value(field, value, output_root, capfd)
    assert outcome == "baked", project
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=project,
        env={"PYTHONPATH": str(project / "src"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert " tests collected" in result.stdout
