"""Baking where the project directory already exists never deletes or judges the
user's files: refused by default, and cookiecutter's overwrite flags honoured."""

import subprocess
import sys

import pytest
from conftest import ROOT
from cookiecutter.exceptions import FailedHookException
from cookiecutter.main import cookiecutter

SLUG = "tf-distributed-trainer"


@pytest.fixture
def existing(tmp_path):
    """A project directory holding the user's work: an edited README, a file at a
    path the default options do not generate, a note, binary output, an empty dir."""
    project = tmp_path / SLUG
    (project / "src" / "tf_distributed_trainer" / "training").mkdir(parents=True)
    files = {
        "README.md": "my own notes about {{ this project }}\n",
        "src/tf_distributed_trainer/training/engine_custom.py": "# my custom loop\n",
        "notes.txt": "do not lose me\n",
    }
    for relative, text in files.items():
        (project / relative).write_text(text, encoding="utf-8")
    (project / "runs").mkdir()
    (project / "runs" / "final.weights.h5").write_bytes(b"\x89HDF\xff\xfe")
    (project / "data").mkdir()
    return project


def bake_into(output_dir, **flags):
    return cookiecutter(str(ROOT), no_input=True, output_dir=str(output_dir), **flags)


def test_existing_directory_is_refused_by_default(existing, tmp_path):
    before = sorted(p.relative_to(existing) for p in existing.rglob("*"))
    result = subprocess.run(
        [sys.executable, "-m", "cookiecutter", "--no-input", "-o", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0
    assert f'Error: "{existing}" directory already exists' in result.stdout + result.stderr
    assert sorted(p.relative_to(existing) for p in existing.rglob("*")) == before


def test_overwrite_if_exists_keeps_files_the_template_does_not_write(existing, tmp_path):
    bake_into(tmp_path, overwrite_if_exists=True)
    assert (existing / "notes.txt").read_text() == "do not lose me\n"
    assert (existing / "runs" / "final.weights.h5").read_bytes() == b"\x89HDF\xff\xfe"
    assert (existing / "data").is_dir()
    # Every file the template writes is overwritten, as the flag says: training/engine_custom.py
    # too (the template writes it for every bake); then, as these options do not
    # need it, the template's copy goes.
    assert (existing / "README.md").read_text().startswith("# TF Distributed Trainer\n")
    assert (existing / "src/tf_distributed_trainer/training/engine_fit.py").is_file()
    assert not (existing / "src/tf_distributed_trainer/training/engine_custom.py").exists()


def test_skip_if_file_exists_keeps_the_users_versions(existing, tmp_path):
    bake_into(tmp_path, overwrite_if_exists=True, skip_if_file_exists=True)
    assert (existing / "README.md").read_text() == "my own notes about {{ this project }}\n"
    # The user's file at a path these options do not generate stays.
    assert (existing / "src/tf_distributed_trainer/training/engine_custom.py").read_text() == (
        "# my custom loop\n"
    )
    assert (existing / "src/tf_distributed_trainer/training/engine_fit.py").is_file()
    assert (existing / "notes.txt").is_file()


def test_refused_options_leave_an_existing_directory_untouched(existing, tmp_path):
    before = {p: p.read_bytes() for p in existing.rglob("*") if p.is_file()}
    with pytest.raises(FailedHookException):
        bake_into(tmp_path, overwrite_if_exists=True, extra_context={"per_replica_batch_size": "0"})
    assert {p: p.read_bytes() for p in existing.rglob("*") if p.is_file()} == before
    assert (existing / "data").is_dir()
