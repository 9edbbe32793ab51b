"""Team repositories stay on the template with cruft: a project created with
`cruft create` passes `cruft check` at once, and a later template change reaches
it with `cruft update` without losing the team's own edits."""

import os
import shutil
import subprocess

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
