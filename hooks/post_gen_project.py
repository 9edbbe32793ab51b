"""Remove what the chosen options do not need, then check the result.

Runs inside the freshly generated project directory. Rules (which files each
option needs) come from hooks/rules.py, shared with the tests.
"""

import json
import os
import sys
from pathlib import Path

CONTEXT = json.loads(r"""{{ cookiecutter | tojson }}""")

sys.path.insert(0, json.loads(r'{{ template_hooks_dir | tojson }}'))
import rules  # noqa: E402


def load_existing(project):
    """What the directory held before this bake (recorded by the pre-gen hook)."""
    snapshot = rules.snapshot_file(project)
    if not snapshot.exists():
        return {}
    existing = json.loads(snapshot.read_text(encoding="utf-8"))
    snapshot.unlink()
    return existing


def written_now(project, relative, existing):
    """True for a file this bake wrote (new, or overwritten: its time changed)."""
    path = project / relative
    return relative not in existing or path.stat().st_mtime_ns != existing[relative]


def remove_unneeded(project, existing):
    for relative in rules.unneeded_files(CONTEXT):
        # Kept only when it is the user's own (there before, and not overwritten).
        if (project / relative).exists() and written_now(project, relative, existing):
            (project / relative).unlink()
    # Directories left empty by the removals (deepest first); never the user's.
    walked = sorted((root for root, _, _ in os.walk(project)), key=len, reverse=True)
    for root in walked:
        relative = Path(root).relative_to(project).as_posix()
        if not os.listdir(root) and Path(root) != project and relative not in existing:
            os.rmdir(root)


def problems(project, existing):
    found = []
    for relative in rules.expected_files(CONTEXT):
        path = project / relative
        if not path.is_file():
            found.append(f"{relative} is missing")
        elif path.stat().st_size == 0 and path.name != "__init__.py":
            found.append(f"{relative} is empty")
    for path in sorted(project.rglob("*")):
        relative = path.relative_to(project).as_posix()
        if not path.is_file() or not written_now(project, relative, existing):
            continue
        if rules.UNRENDERED_RE.search(path.read_text(encoding="utf-8")):
            found.append(f"{relative} holds unrendered template syntax")
    return found


def main():
    project = Path.cwd()
    existing = load_existing(project)
    remove_unneeded(project, existing)
    found = problems(project, existing)
    if found:
        print(
            f"error: the generated project is incomplete: {found[0]}"
            " - report this as a template bug",
            file=sys.stderr,
            flush=True,
        )
        sys.exit(1)


if __name__ == "__main__":
    main()
