"""The problem this project trains: your model and data go here, and only here.

This module is yours: it knows nothing about distribution. The framework (the
strategy, sharding, the input pipeline, the engines, evaluation, export, the
doctor) reaches it through these names alone.

Its data:

- `FEATURES`: one record, declared once (toolkit/features.py): each field's name,
  dtype and shape, and which field is the label; the others are the model's
{%- if cookiecutter.task == "tabular" %}
  inputs (here a vector of NUM_FEATURES floats, and a class index). From it the
  framework writes records (`make-data`, `import-csv`), checks them in `index`
  (each record's values, and a ClassLabel's labels: each a class), parses them a
  batch at a time in `train`, turns a CSV row into an example (a column named
  after a field goes to it; the others, in order, fill the one field left:
  here 'features'), and takes what a client sends the exported model (the
  model's inputs, by name). A format that needs more defines the piece itself
  (data/record_format.py names them: `encode`, `parse_batch`, `check_labels`...).
{%- else %}
  inputs (here an image's JPEG bytes, and a class index). From it the framework
{%- if cookiecutter.data_source == "tfrecord" %}
  writes records (`make-data`, `import-images`), checks them in `index` (each
  image decodes, and each label is a class), parses a batch of records at a
  time in `train`, and takes what a client sends the exported model.
{%- else %}
  takes what a client sends the exported model (and a TFRecord project's
  commands write, check and parse records).
{%- endif %} A format
  that needs more defines the piece itself (data/record_format.py names them): here
  `SERVING_INPUT`, the name a client sends JPEG bytes under.
{%- endif %}
- `sample_examples(num_examples, seed)`: seeded (inputs, labels) arrays: the
  sample data, the GPU smoke test's batches, the tests' examples.
- `prepare_batch(inputs, keys)`: a batch of model inputs as parsed -> as the
  model takes them (`keys`: one stateless seed per example for augmentation;
  None in evaluation and serving){% if cookiecutter.task == "image" %}: here JPEG bytes (or the sample's
  decoded images) -> crops, decoding only each training crop's part{% endif %}.
- `summarize_batch(inputs, labels)` and `statistics_from(sums)`: what the model
  learns from the training data before training (a Normalization layer's mean
  and variance, a vocabulary). `summarize_batch` gets numpy batches of model
  inputs as evaluation prepares them and returns sums (a dict of arrays, or
  of {value: count} dicts to learn a vocabulary from), which
  the framework adds up over the training split{% if cookiecutter.data_source == "tfrecord" %} in `index`{% else %} before step 1{% endif %};
  `statistics_from` turns them into the JSON values `build_model` gets, the
  same in training, evaluation and export (data/statistics.py).

Its problem:

- `build_model(statistics)`: a Keras model from inputs to float32 outputs
  (here, logits). The engines
  call it under `strategy.scope()`, so build every variable inside it.
  Evaluation runs it on one blank example (zeros, empty strings) where a
  replica's share of a batch is empty, and counts it for nothing: the model
  must take one.
- `per_example_loss(labels, logits)`: one loss per example (here, against
  labels smoothed by `LABEL_SMOOTHING`). The framework scales it by the global
  batch and adds the model's regularization losses.
- `METRIC_NAME` with `per_example_metric`: the metric reported in training
  and evaluation is the mean of `per_example_metric` over the examples.
- `serving_outputs(outputs)`: what the exported model returns for the model's
  outputs (here, logits and probabilities).

Everything random in `prepare_batch` draws from `keys`
(stateless ops), so a resumed run sees what an uninterrupted run sees.
"""

import numpy as np
{%- if cookiecutter.task == "image" %}
import tensorflow as tf
{%- endif %}

from {{ cookiecutter.package_name }}.distribute.compat import keras
from {{ cookiecutter.package_name }}.toolkit import features, heads, {% if cookiecutter.task == "image" %}image_ops, {% endif %}moments
{% include "task/" ~ cookiecutter.task ~ ".py" %}