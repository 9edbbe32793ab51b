"""The generated .pre-commit-config.yaml: its hooks install (from the package
index, once) and pass on a fresh project, and they do fail on code that is not
formatted or a file with trailing whitespace."""

import subprocess
from pathlib import Path

import pytest
from conftest import bake
from test_cruft import git
from test_deployment_files import tool

PROJECTS = [
    {},
    {"task": "image", "training_loop": "both", "distribution": "multi_worker",
     "data_source": "tfrecord", "mixed_precision": "bfloat16", "launcher": "kubernetes",
     "ci_provider": "gitlab"},
]


def pre_commit(project):
    return subprocess.run(
        [tool("pre-commit"), "run", "--all-files"], cwd=project, capture_output=True, text=True
    )


def committed_bake(cookies, options):
    result = bake(cookies, **options)
    assert result.exit_code == 0, result.exception
    project = Path(result.project_path)
    git("init", "-q", cwd=project)
    git("add", "-A", cwd=project)
    return project


@pytest.mark.parametrize("options", PROJECTS, ids=["default", "image-kubernetes-gitlab"])
def test_the_hooks_pass_on_a_fresh_project(cookies, options):
    project = committed_bake(cookies, options)
    hooks = pre_commit(project)
    assert hooks.returncode == 0, hooks.stdout + hooks.stderr
    for name in ("ruff check", "ruff format", "check TOML", "check YAML", "fix end of files"):
        assert any(line.startswith(name) and line.endswith("Passed")
                   for line in hooks.stdout.splitlines()), hooks.stdout


def test_the_hooks_fail_on_unformatted_code_and_trailing_whitespace(cookies):
    project = committed_bake(cookies, {})
    config = project / "src" / "tf_distributed_trainer" / "config.py"
    config.write_text(config.read_text(encoding="utf-8") + "\nx = [1,\n  2]\n", "utf-8")
    readme = project / "README.md"
    readme.write_text(readme.read_text(encoding="utf-8") + "a note   \n", "utf-8")
    git("add", "-A", cwd=project)
    hooks = pre_commit(project)
    assert hooks.returncode != 0
    failed = [line for line in hooks.stdout.splitlines() if line.endswith("Failed")]
    assert any(line.startswith("ruff format") for line in failed), hooks.stdout
    assert any(line.startswith("trim trailing whitespace") for line in failed), hooks.stdout
