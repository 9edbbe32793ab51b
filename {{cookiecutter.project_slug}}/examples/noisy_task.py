"""A worked example: the sample classifier with random layers, as most users'
models have. Gaussian noise on the standardized features and dropout after each
hidden layer; the data, loss, metric and record format are the sample task's.

Copy it over
src/{{ cookiecutter.package_name }}/task.py
and the framework trains it unchanged: each replica, on every worker, draws its
own masks; a run killed mid-epoch resumes to the weights of an uninterrupted
one (the layers' generator state is in every checkpoint); the doctor and the
equivalence tests put the random layers in inference mode to compare N replicas
with one device. The template's own tests swap it in and run the project's
tests on it.
"""

import numpy as np

from {{ cookiecutter.package_name }} import features, heads, moments
from {{ cookiecutter.package_name }}.compat import keras
{%- set model_partial = "models/tabular_noisy.py" %}
{% include "task/tabular.py" %}