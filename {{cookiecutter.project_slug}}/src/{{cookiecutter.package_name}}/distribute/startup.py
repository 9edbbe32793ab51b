"""TensorFlow started quietly: the lines its C++ side prints while it loads and
looks for GPUs are hidden unless --verbose. The commands start it so, and so do
the processes the import commands convert in (it imports nothing that loads
TensorFlow before it runs).
"""

import contextlib
import logging
import os
import re
import sys
import tempfile
import warnings

from {{ cookiecutter.package_name }}.distribute import preemption

# What TensorFlow's C++ side prints while it loads and looks for GPUs, before its
# log level applies (TF_CPP_MIN_LOG_LEVEL cannot hide it): shown with --verbose.
NATIVE_STARTUP_NOISE = re.compile(
    r"All log messages before absl::InitializeLog|oneDNN custom operations are on"
    r"|cudart_stub\.cc|Could not find cuda drivers|failed call to cuInit"
    r"|Unable to register cu(DNN|FFT|BLAS) factory|computation_placer\.cc"
    r"|cpu_feature_guard\.cc|the appropriate compiler flags|To enable the following instructions"
    r"|TF-TRT Warning|Attempting to register factory for plugin"
)


@contextlib.contextmanager
def native_startup_noise_hidden():
    """Run the block with this process's stderr (file descriptor 2, where C++
    writes) captured, then pass on every line but NATIVE_STARTUP_NOISE."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            for line in captured.read().decode(errors="replace").splitlines(keepends=True):
                if not NATIVE_STARTUP_NOISE.search(line):
                    sys.stderr.write(line)
            sys.stderr.flush()


def start_tensorflow(verbose):
    """Load TensorFlow and look for GPUs (where CUDA prints its start-up lines);
    quietly unless `verbose`."""
    if not verbose:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with contextlib.nullcontext() if verbose else native_startup_noise_hidden():
        import tensorflow as tf

        tf.config.list_physical_devices("GPU")
    if verbose:
        return
    # TensorFlow's info lines (each checkpoint save logs its sharding time) and a
    # warning tf.distribute's own input code triggers on every traced dataset.
    for name in ("tensorflow", "absl"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", "To make it possible to preserve tf.data options")


def start_conversion_process():
    """The import commands' conversion processes: SIGTERM ends one, as by default
    (it inherits the command's blocked mask: distribute/preemption.py), and TensorFlow
    starts as quietly as in the command. Here, in a module that loads nothing
    that loads TensorFlow, so that the process imports this before it starts."""
    preemption.default_sigterm()
    start_tensorflow(False)
