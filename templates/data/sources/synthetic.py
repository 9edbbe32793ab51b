"""The data this project trains on: the task's seeded sample, held in memory.

To train on your own arrays, return them from `load_sources`; for data that does
not fit in memory, bake the project with data_source=tfrecord.
"""

from {{ cookiecutter.package_name }} import task
from {{ cookiecutter.package_name }}.data.pipeline import ArraySource
{% if cookiecutter.task == "image" %}
TRAIN_EXAMPLES = 2048
EVAL_EXAMPLES = 512
{%- else %}
TRAIN_EXAMPLES = 4096
EVAL_EXAMPLES = 1024
{%- endif %}


def load_sources(config):
    """The training and evaluation sources."""
    del config  # the sample takes no settings
    return (
        ArraySource(*task.sample_examples(TRAIN_EXAMPLES, seed=0)),
        ArraySource(*task.sample_examples(EVAL_EXAMPLES, seed=1)),
    )
