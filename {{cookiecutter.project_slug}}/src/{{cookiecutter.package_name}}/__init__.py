"""{{ cookiecutter.project_slug }}: data-parallel TensorFlow training with tf.distribute."""
{%- if cookiecutter.keras_package == "tf_keras" %}

import os

# tf_keras (Keras 2) is selected before TensorFlow is imported anywhere.
os.environ["TF_USE_LEGACY_KERAS"] = "1"
{%- endif %}


class TrainerError(Exception):
    """A problem the user can fix; str() is the one-line message the CLI prints."""
