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


def remove_unneeded(project):
    for relative in rules.unneeded_files(CONTEXT):
        path = project / relative
        if path.exists():
            path.unlink()
    # Directories left empty by the removals (deepest first).
    walked = sorted((root for root, _, _ in os.walk(project)), key=len, reverse=True)
    for root in walked:
        if not os.listdir(root) and Path(root) != project:
            os.rmdir(root)


def problems(project):
    found = []
    for relative in rules.expected_files(CONTEXT):
        path = project / relative
        if not path.is_file():
            found.append(f"{relative} is missing")
        elif path.stat().st_size == 0 and path.name != "__init__.py":
            found.append(f"{relative} is empty")
    for path in sorted(project.rglob("*")):
        if path.is_file() and rules.UNRENDERED_RE.search(path.read_text(encoding="utf-8")):
            found.append(f"{path.relative_to(project)} holds unrendered template syntax")
    return found


def main():
    project = Path.cwd()
    remove_unneeded(project)
    found = problems(project)
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
