"""Validate the chosen options before cookiecutter writes any file.

The user's values arrive as JSON data (never pasted into this source), and the
rules come from hooks/rules.py, which the tests use as well.
"""

import json
import os
import subprocess
import sys

CONTEXT = json.loads(r"""{{ cookiecutter | tojson }}""")

sys.path.insert(0, json.loads(r'{{ template_hooks_dir | tojson }}'))
import rules  # noqa: E402

# Removes, once cookiecutter has deleted the (empty) project directory, the
# parent directories it created for a slug holding a path separator.
CLEANUP = """
import os, sys, time
project_dir, output_dir = sys.argv[1], sys.argv[2]
deadline = time.monotonic() + 30
while os.path.exists(project_dir) and time.monotonic() < deadline:
    time.sleep(0.05)
parent = os.path.dirname(project_dir)
while parent != output_dir and parent.startswith(output_dir + os.sep):
    try:
        os.rmdir(parent)
    except OSError:
        break
    parent = os.path.dirname(parent)
"""


def remove_created_parents():
    project_dir = os.path.abspath(os.getcwd())
    output_dir = os.path.abspath(CONTEXT["_output_dir"])
    if os.path.dirname(project_dir) != output_dir:
        subprocess.Popen(
            [sys.executable, "-c", CLEANUP, project_dir, output_dir],
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )


def main():
    try:
        rules.validate(CONTEXT)
    except rules.OptionError as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        remove_created_parents()
        sys.exit(1)
    # What the directory already holds (--overwrite-if-exists, --skip-if-file-exists):
    # the post-gen hook leaves those paths alone.
    existing = rules.existing_paths(os.getcwd())
    rules.snapshot_file(os.getcwd()).write_text(json.dumps(existing), encoding="utf-8")


if __name__ == "__main__":
    main()
