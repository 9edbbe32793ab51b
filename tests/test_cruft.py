"""Team repositories stay on the template with cruft: a project created with
`cruft create` passes `cruft check` at once, and a later template change reaches
it with `cruft update` without losing the team's own edits."""

import io
import os
import shutil
import subprocess
import sys
import tarfile

import pytest
from conftest import ROOT
from test_deployment_files import tool

GIT = {
    **os.environ,
    "GIT_AUTHOR_NAME": "test", "GIT_AUTHOR_EMAIL": "test@example.com",
    "GIT_COMMITTER_NAME": "test", "GIT_COMMITTER_EMAIL": "test@example.com",
}
CONFIG = "configs/default.toml"


def git(*args, cwd):
    subprocess.run(["git", *args], cwd=cwd, env=GIT, check=True, capture_output=True)


def cruft(*args, cwd):
    return subprocess.run([tool("cruft"), *args], cwd=cwd, env=GIT, capture_output=True, text=True)


def clone_of_this_template(path):
    """A git repository holding this template's files as they are now (committed
    or not), as a team's fork would."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout.split("\0")
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (path / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, path / name)
    git("init", "-q", cwd=path)
    git("add", "-A", cwd=path)
    git("commit", "-qm", "template", cwd=path)


def replace_line(path, old, new):
    text = path.read_text(encoding="utf-8")
    assert old in text, f"{path} has no line {old!r}"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def test_cruft_create_check_and_update_round_trip(tmp_path):
    template, output = tmp_path / "template", tmp_path / "projects"
    template.mkdir()
    clone_of_this_template(template)
    created = cruft(
        "create", "--no-input", "--output-dir", str(output), str(template), cwd=tmp_path
    )
    assert created.returncode == 0, created.stdout + created.stderr
    project = output / "tf-distributed-trainer"
    assert (project / ".cruft.json").is_file()
    git("init", "-q", cwd=project)
    git("add", "-A", cwd=project)
    git("commit", "-qm", "baked", cwd=project)
    checked = cruft("check", cwd=project)
    assert checked.returncode == 0, checked.stdout + checked.stderr

    # The team edits its project; the template changes a default.
    replace_line(project / CONFIG, "learning_rate = 0.01\n", "learning_rate = 0.003\n")
    git("commit", "-qam", "our learning rate", cwd=project)
    template_config = template / "{{cookiecutter.project_slug}}" / CONFIG
    replace_line(template_config, "epochs = 3\n", "epochs = 5\n")
    git("commit", "-qam", "five epochs by default", cwd=template)
    outdated = cruft("check", cwd=project)
    assert outdated.returncode != 0 and "out of date" in outdated.stdout

    updated = cruft("update", "--skip-apply-ask", cwd=project)
    assert updated.returncode == 0, updated.stdout + updated.stderr
    config = (project / CONFIG).read_text(encoding="utf-8")
    assert "epochs = 5\n" in config and "learning_rate = 0.003\n" in config
    checked = cruft("check", cwd=project)
    assert checked.returncode == 0, checked.stdout + checked.stderr


# The template's last commit with the package in one folder (before issue 51's
# layers): the version a team's project may have been created from.
FLAT_LAYOUT = "51adf23"


def test_a_project_from_the_flat_layout_updates_to_the_layers_keeping_its_task_and_config(
    tmp_path,
):
    """Every module moves into its layer's folder; the team's own lines in task.py
    and its config come through, with no conflict to resolve."""
    found = subprocess.run(
        ["git", "cat-file", "-e", f"{FLAT_LAYOUT}^{{commit}}"], cwd=ROOT, capture_output=True
    )
    if found.returncode != 0:
        pytest.skip(f"needs the template's git history (commit {FLAT_LAYOUT}): a shallow clone")
    template, output = tmp_path / "template", tmp_path / "projects"
    template.mkdir()
    archive = subprocess.run(
        ["git", "archive", "--format=tar", FLAT_LAYOUT], cwd=ROOT, check=True, capture_output=True
    ).stdout
    tarfile.open(fileobj=io.BytesIO(archive)).extractall(template, filter="data")
    git("init", "-q", cwd=template)
    git("add", "-A", cwd=template)
    git("commit", "-qm", "flat layout", cwd=template)
    options = '{"data_source": "tfrecord", "distribution": "multi_worker"}'
    created = cruft(
        "create", "--no-input", "--extra-context", options, "--output-dir", str(output),
        str(template), cwd=tmp_path,
    )
    assert created.returncode == 0, created.stdout + created.stderr
    project = output / "tf-distributed-trainer"
    package = project / "src" / "tf_distributed_trainer"
    assert (package / "controller.py").is_file()
    git("init", "-q", cwd=project)
    git("add", "-A", cwd=project)
    git("commit", "-qm", "baked", cwd=project)

    # The team's own model width and learning rate.
    width = "    for width in (64, 64):\n", "    for width in (256, 32):\n"
    replace_line(package / "task.py", *width)
    replace_line(project / CONFIG, "learning_rate = 0.01\n", "learning_rate = 0.003\n")
    git("commit", "-qam", "our model and learning rate", cwd=project)
    git("rm", "-rq", ".", cwd=template)
    shutil.rmtree(template / "{{cookiecutter.project_slug}}", ignore_errors=True)
    clone_of_this_template(template)

    updated = cruft("update", "--skip-apply-ask", cwd=project)
    assert updated.returncode == 0, updated.stdout + updated.stderr
    left = [path for path in project.rglob("*") if path.suffix in (".rej", ".orig")]
    assert not left
    unmerged = subprocess.run(
        ["git", "diff", "--name-only", "--diff-filter=U"], cwd=project, capture_output=True,
        text=True,
    )
    assert unmerged.stdout == ""
    assert not (package / "controller.py").exists() and not (package / "data.py").exists()
    assert (package / "training" / "controller.py").is_file()
    assert (package / "data" / "pipeline.py").is_file()
    assert (package / "distribute" / "strategy.py").is_file()
    task = (package / "task.py").read_text(encoding="utf-8")
    assert width[1] in task and "<<<<<<<" not in task
    assert "from tf_distributed_trainer.toolkit import features" in task
    assert "learning_rate = 0.003\n" in (project / CONFIG).read_text(encoding="utf-8")
    helped = subprocess.run(
        [sys.executable, "-m", "tf_distributed_trainer", "--help"],
        cwd=project, env={**os.environ, "PYTHONPATH": "src"}, capture_output=True, text=True,
    )
    assert helped.returncode == 0 and "launch" in helped.stdout, helped.stderr
