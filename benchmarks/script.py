"""The command line the bench's measuring scripts share (speed.py runs them):
    python benchmarks/SCRIPT.py PACKAGE WORKDIR [--quick]
which prints the script's measure(package, workdir, quick) as JSON."""

import argparse
import json
from pathlib import Path


def run(measure, doc):
    """Parse the command line (`doc`'s first line describes it) and print
    measure(package, workdir, quick) as one line of JSON."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("package")
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    print(json.dumps(measure(args.package, args.workdir, args.quick)))
