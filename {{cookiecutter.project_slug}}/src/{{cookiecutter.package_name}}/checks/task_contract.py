"""What the framework asks of task.py, checked from its source as a command
starts: a task that lacks a piece of its problem, or imports from this package
what it does not have (a task written before the package's layers), is refused
in one line naming it, not with an ImportError from wherever it is first used.
The source is read, not run: task.py's own top-level TensorFlow code must wait
for the strategy (a strategy's devices are fixed when TensorFlow's runtime
starts).

The record's pieces are data/record_format.py's to give: a task without FEATURES
is told there, in one line, which piece it lacks.
"""

import ast
from pathlib import Path

from {{ cookiecutter.package_name }} import TrainerError

PACKAGE = "{{ cookiecutter.package_name }}"
# This package's folder: its modules are looked up there, never imported.
PACKAGE_DIR = Path(__file__).resolve().parent.parent

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
    path = path or PACKAGE_DIR / "task.py"
    with open(path, encoding="utf-8") as source:
        tree = ast.parse(source.read())
    missing_import = next(missing_imports(tree), None)
    if missing_import:
        raise TrainerError(not_there(missing_import))
    defined = top_level_names(tree)
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


def missing_imports(tree):
    """What task.py imports from this package that it lacks: a module, or a name
    of one of its packages (`from PACKAGE.toolkit import features`). Read from
    the files, not imported: nothing may start TensorFlow before the strategy.
    The names a module defines are left to the import itself."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            named = [alias.name for alias in node.names]
            yield from (name for name in named if ours(name) and location(name) is None)
        elif isinstance(node, ast.ImportFrom) and ours(module := absolute(node)):
            where = location(module)
            if where is None:
                yield module
            elif where.is_dir():  # a package: its modules, and its __init__'s names
                defined = top_level_names(ast.parse((where / "__init__.py").read_text("utf-8")))
                for alias in node.names:
                    name = f"{module}.{alias.name}"
                    if alias.name not in defined and location(name) is None:
                        yield name


def ours(name):
    return name.split(".")[0] == PACKAGE


def absolute(node):
    """An import's module, `from .toolkit import x` (task.py's package) included."""
    if node.level:
        return ".".join(filter(None, (PACKAGE, node.module)))
    return node.module or ""


def location(name):
    """The file or folder of this package's module `name`, or None."""
    path = PACKAGE_DIR.parent
    for part in name.split("."):
        if path.is_file():
            return None  # a name inside a module is no module
        if (path / part / "__init__.py").is_file():
            path = path / part
        elif (path / f"{part}.py").is_file():
            path = path / f"{part}.py"
        else:
            return None
    return path


def not_there(name):
    """The one line for an import of `name`, which this package lacks: where a
    module of that name went, for a task written before the package's layers."""
    last = name.rpartition(".")[2]
    moved = sorted(path.relative_to(PACKAGE_DIR) for path in PACKAGE_DIR.rglob(f"{last}.py"))
    if moved:
        now = ".".join((PACKAGE, *moved[0].with_suffix("").parts))
        return (
            f"task.py imports {name}, which is {now} since the package moved into its"
            " layers (ARCHITECTURE.md) - change the import"
        )
    return f"task.py imports {name}, which this package does not have - import what it has"
