"""What the framework asks of task.py, checked when a command starts: a task
that lacks a piece is refused in one line naming it, not with an ImportError
from wherever the piece is first used."""

from {{ cookiecutter.package_name }} import TrainerError, record_format, task

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
WHERE_TO_LOOK = (
    "the README's 'Your own model and data' says what each is, and examples/ holds"
    " complete tasks to copy"
)


def check_task():
    """TrainerError naming what task.py lacks, if anything."""
    missing = [name for name in PROBLEM if not hasattr(task, name)]
    if missing:
        raise TrainerError(f"task.py defines no {', '.join(missing)} - {WHERE_TO_LOOK}")
    if record_format.FEATURES is None:
        unset = [name for name in record_format.DERIVED if not hasattr(task, name)]
        if unset:
            # A task written before FEATURES defined its record piece by piece.
            more = f" and {len(unset) - 3} more" if len(unset) > 3 else ""
            raise TrainerError(
                f"task.py has no FEATURES, and defines no {', '.join(unset[:3])}{more} - declare"
                " its record once in FEATURES (features.py) and delete its own encode,"
                f" parse_batch and the like; {WHERE_TO_LOOK}"
            )
