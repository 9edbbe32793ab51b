"""{{ cookiecutter.project_slug }}: data-parallel TensorFlow training with tf.distribute."""
{% if cookiecutter.keras_package == "tf_keras" %}
import os
{%- endif %}
import re
import time

# Imported first by every command: what `seconds_to_first_step` counts from.
PROCESS_STARTED = time.monotonic()
{%- if cookiecutter.keras_package == "tf_keras" %}

# tf_keras (Keras 2) is selected before TensorFlow is imported anywhere.
os.environ["TF_USE_LEGACY_KERAS"] = "1"
{%- endif %}


class TrainerError(Exception):
    """A problem the user can fix; str() is the one-line message the CLI prints."""


def first_line(err, limit=300):
    """The first line of an error's message (for one-line errors), or "no message".
    An error raised inside a tf.function starts with "in user code:" and a
    traceback: its own message is the last line."""
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    if not lines:
        return "no message"
    if lines[0] == "in user code:":
        return re.sub(r"^\w+(Error|Exception): ", "", lines[-1])[:limit]
    return lines[0][:limit]


def write_atomically(path, text):
    """Write `text` to `path` (a local path or a URL) whole or not at all: a
    reader, another worker starting, never sees half a file."""
    import tensorflow as tf  # here, not above: cluster.py runs before TensorFlow loads

    partial = f"{path}.partial"
    try:
        with tf.io.gfile.GFile(partial, "w") as handle:
            handle.write(text)
        tf.io.gfile.rename(partial, path, overwrite=True)
    except tf.errors.OpError:
        if tf.io.gfile.exists(partial):
            tf.io.gfile.remove(partial)
        raise
