"""The task's record format, as the framework reads and writes it: task.py's
own function or constant where it defines one, else what its FEATURES
declaration derives (toolkit/features.py).

A task declares its record once and defines none of these; one whose format
needs more defines the pieces it changes (the image task: its SERVING_INPUT's
name), and the rest still come from the declaration.
"""

from {{ cookiecutter.package_name }} import TrainerError, task

FEATURES = getattr(task, "FEATURES", None)


def own_or_derived(name, derive):
    """task.`name` if task.py defines it, else `derive(FEATURES)`."""
    if hasattr(task, name):
        return getattr(task, name)
    if FEATURES is None:
        raise TrainerError(
            f"task.py has no FEATURES declaration to derive {name} from - declare its"
            " record once in FEATURES (toolkit/features.py), as the sample task.py does (a task"
            f" written before FEATURES: its own record functions may stay), or define {name}"
        )
    return derive(FEATURES)


def derived_parse_batch(features):
    def parse_batch(records, keys=None):
        """A batch of records -> the task's model inputs (prepare_batch, with
        the examples' keys in training) and labels."""
        inputs, labels = features.parse(records)
        return task.prepare_batch(inputs, keys), labels

    return parse_batch


def derived_serving_inputs(features):
    del features

    def serving_inputs(received):
        """What a client sends -> model inputs, prepared as evaluation prepares them."""
        return task.prepare_batch(received, None)

    return serving_inputs


# Each name the framework reads, and how the declaration derives it.
DERIVED = {
    "FORMAT": lambda features: features.description,
    "LABEL_SHAPE": lambda features: features.label_shape,
    "LABEL_COLUMN": lambda features: features.label_name,
    "INPUT_VALUES": lambda features: features.input_values,
    "SERVING_INPUT": lambda features: features.serving_input(),
    "encode": lambda features: features.encode,
    "parse_batch": derived_parse_batch,
    "describe_batch": lambda features: features.describe_batch,
    "check_labels": lambda features: features.check_labels,
    "example_from_csv": lambda features: features.from_csv,
    "serving_inputs": derived_serving_inputs,
}


def __getattr__(name):
    """`from record_format import encode` and the like: resolved when first
    asked for, so a task that never writes records needs no `encode`."""
    if name not in DERIVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = own_or_derived(name, DERIVED[name])
    globals()[name] = value
    return value
