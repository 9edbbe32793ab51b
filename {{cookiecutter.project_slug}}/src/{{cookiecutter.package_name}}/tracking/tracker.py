"""Where a run's scalars go: TensorBoard event files in this worker's `logs`
directory (the chief's: `<model dir>/logs`; the other workers' are scratch).
{%- if cookiecutter.tracking == "mlflow" %}
On the chief, the run's MLflow run too (tracking/mlflow_run.py).
{%- endif %}

The controller hands over, at their global step, the scalars of each interval
between checkpoints (loss, learning rate, examples per second) just before the
checkpoint that ends it is saved, and the evaluation's at each epoch end; each
is flushed at once. So a kill loses none of a checkpoint's interval; a resumed
run records again the steps after its checkpoint, which the killed attempt may
have recorded too (TensorBoard shows both
{%- if cookiecutter.tracking == "mlflow" %}, MLflow the first{% endif %}).
An epoch's evaluation comes after its last checkpoint: a SIGTERM agreed at the
epoch's end, or a kill during the evaluation, leaves that epoch without
evaluation scalars (the resumed run goes on from the next epoch).
"""

import os

import tensorflow as tf
{%- if cookiecutter.tracking == "mlflow" %}

from {{ cookiecutter.package_name }}.distribute.strategy import is_chief
{%- endif %}


class TensorBoardScalars:
    """Scalars by global step, written to TensorBoard event files in `log_dir`."""

    def __init__(self, log_dir):
        self.writer = tf.summary.create_file_writer(log_dir)

    def record(self, global_step, scalars):
        """{name: value} at `global_step`, flushed (the writer would hold them
        up to 2 minutes)."""
        with self.writer.as_default():
            for name, value in scalars.items():
                tf.summary.scalar(name, value, step=global_step)
        self.writer.flush()

    def end(self, status, summary=None):
        """The run ended (FINISHED, KILLED or FAILED): the event file is closed."""
        self.writer.close()
{% include "tracking/tracker/" ~ cookiecutter.tracking ~ ".py" %}