"""A worked example: a deep model users bring, a keras.applications backbone
(MobileNetV3Small, its 34 BatchNormalization layers rebuilt synchronized) after
Keras' augmentation layers (random flips and translations: each replica, on
every worker, draws its own, and a run killed mid-epoch resumes to the weights
of an uninterrupted one), with a dropout head; the data, loss, metric and
record format are the sample task's.

Copy it over
src/{{ cookiecutter.package_name }}/task.py
and the framework trains it unchanged. The template's own tests swap it in and
run the project's tests on it.
"""

import numpy as np
import tensorflow as tf

from {{ cookiecutter.package_name }}.distribute.compat import keras
from {{ cookiecutter.package_name }}.toolkit import features, heads, image_ops, moments
{%- set model_partial = "models/image_backbone.py" %}
{% include "task/image.py" %}