"""A worked example: the sample image classifier with augmentation layers in its
model (random flips and translations, Keras' `Random*` layers), on top of the
random crops `prepare_batch` draws from its keys; the data, loss, metric and
record format are the sample task's.

Copy it over
src/{{ cookiecutter.package_name }}/task.py
and the framework trains it unchanged: each replica, on every worker, draws its
own transformations; a run killed mid-epoch resumes to the weights of an
uninterrupted one (the layers' generator state is in every checkpoint); the
doctor and the equivalence tests put the random layers in inference mode to
compare N replicas with one device. The template's own tests swap it in and run
the project's tests on it.
"""

import numpy as np
import tensorflow as tf

from {{ cookiecutter.package_name }} import features, heads, image_ops, moments
from {{ cookiecutter.package_name }}.compat import keras
{%- set model_partial = "models/image_augmented.py" %}
{% include "task/image.py" %}