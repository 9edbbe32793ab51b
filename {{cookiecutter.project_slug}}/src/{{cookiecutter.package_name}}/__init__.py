"""{{ cookiecutter.project_slug }}: data-parallel TensorFlow training with tf.distribute."""
{% if cookiecutter.keras_package == "tf_keras" %}
import os
{%- endif %}
import re
import sys
import time

# Imported first by every command: what `seconds_to_first_step` counts from.
PROCESS_STARTED = time.monotonic()
{%- if cookiecutter.keras_package == "tf_keras" %}

# tf_keras (Keras 2) is selected before TensorFlow is imported anywhere.
os.environ["TF_USE_LEGACY_KERAS"] = "1"
{%- endif %}


# The exit status of a run stopped for want of progress: a stall (training/watchdog.py),
# or infrastructure that failed this time (a transient error): 128 + SIGALRM, a
# timer ran out. Retryable: the restart resumes from the last checkpoint.
STALLED_EXIT_STATUS = 142
# TensorFlow's errors for infrastructure that failed this time, by class name:
# storage or a peer that did not answer, a device or collective library's
# internal error (NCCL, cuDNN), memory, a read that failed its checksum and that
# a scan of the files did not confirm (data/sources.py). Exit 2 would end the run for
# good; any other error of TensorFlow's is a bug (exit 1, its traceback).
TRANSIENT_OP_ERRORS = (
    "UnavailableError",
    "DeadlineExceededError",
    "AbortedError",
    "CancelledError",
    "InternalError",
    "UnknownError",
    "ResourceExhaustedError",
    "DataLossError",
)


# Called with (exit status, cause) as the process
# ends, however it ends (the watchdog's and the SIGTERM thread's os._exit too):
# training/attempts.py records how the attempt ended.
LAST_WORDS = []


class TrainerError(Exception):
    """A problem the user can fix; str() is the one-line message the CLI prints."""

    exit_status = 2


class TransientError(Exception):
    """Infrastructure that failed this time (storage that did not answer, a
    worker that cannot read what its peers read); str() is the one-line message.
    The command exits with `exit_status`, for the job to be restarted."""

    exit_status = STALLED_EXIT_STATUS


def last_words(status, cause):
    for say in LAST_WORDS:
        say(status, cause)


def is_transient(err):
    """Whether `err` is infrastructure that failed this time (see above)."""
    if isinstance(err, TransientError):
        return True
    tensorflow = sys.modules.get("tensorflow")  # a TensorFlow error needs it loaded
    return (
        tensorflow is not None
        and isinstance(err, tensorflow.errors.OpError)
        and type(err).__name__ in TRANSIENT_OP_ERRORS
    )


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


def is_remote(path):
    """Whether `path` is a URL of a file system TensorFlow reaches (gs://, s3://,
    hdfs://, ram://...) rather than a local path. A URL goes through tf.io.gfile
    only: pathlib reads gs://b/run as the local directory gs:/b/run."""
    return re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*://", str(path)) is not None


def write_atomically(path, text):
    """Write `text` to `path` (a local path or a URL) whole or not at all: a
    reader, another worker starting, never sees half a file."""
    import tensorflow as tf  # here, not above: distribute/cluster.py runs before TensorFlow loads

    partial = f"{path}.partial"
    try:
        with tf.io.gfile.GFile(partial, "w") as handle:
            handle.write(text)
        tf.io.gfile.rename(partial, path, overwrite=True)
    except tf.errors.OpError:
        if tf.io.gfile.exists(partial):
            tf.io.gfile.remove(partial)
        raise
