"""What the framework asks of task.py, checked from its source as a command
starts: a task that lacks a piece of its problem is refused in one line naming
it, not with an ImportError from wherever the piece is first used. The source
is read, not run: task.py's own top-level TensorFlow code must wait for the
strategy (a strategy's devices are fixed when TensorFlow's runtime starts).

The record's pieces are data/record_format.py's to give: a task without FEATURES
is told there, in one line, which piece it lacks.
"""

import ast
import importlib.util

from {{ cookiecutter.package_name }} import TrainerError

# The task's problem, which it always defines (its record comes from FEATURES).
PROBLEM = (
    "build_model",
    "per_example_loss",
    "per_example_metric",
    "METRIC_NAME",
    "serving_outputs",
    "sample_examples",
    "prepare_batch",
    "summarize_batch",
    "statistics_from",
)


def check_task(path=None):
    """TrainerError naming what task.py (`path`; default: this package's) lacks."""
    path = path or importlib.util.find_spec("{{ cookiecutter.package_name }}.task").origin
    with open(path, encoding="utf-8") as source:
        defined = top_level_names(ast.parse(source.read()))
    if "*" in defined:
        return  # a star import may define anything: the first use will tell
    missing = [name for name in PROBLEM if name not in defined]
    if missing:
        raise TrainerError(
            f"task.py defines no {', '.join(missing)} - docs/your-model.md says what each"
            " is, and examples/ holds complete tasks to copy"
        )


def top_level_names(tree):
    """The names a module's top level defines: functions, classes, assignments
    (`a, b = ...` too) and imports."""
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in target.elts if isinstance(target, ast.Tuple) else [target]:
                    if isinstance(name, ast.Name):
                        names.add(name.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    return names
