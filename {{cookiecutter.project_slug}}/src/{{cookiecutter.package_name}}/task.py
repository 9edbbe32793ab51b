"""The problem this project trains: your model and data go here, and only here.

This module is yours: it knows nothing about distribution. The framework (the
strategy, sharding, the input pipeline, the engines, evaluation, export, the
doctor) reaches it through these names alone.

Its data:
{%- if cookiecutter.task == "tabular" %}

- `FEATURES`: one record, declared once (features.py): each field's name,
  dtype and shape, and which field is the label; the others are the model's
  inputs (here a vector of NUM_FEATURES floats, and a class index). From it the framework
  writes records (`make-data`, `import-csv`), checks them in `index` (each
  record's values, and a ClassLabel's labels: each a class), parses them a
  batch at a time in `train`, turns a CSV row into an example (a column named
  after a field goes to it; the others, in order, fill the one field left:
  here 'features'), and takes what a client sends the exported model (the
  model's inputs, by name). A format that needs more defines the piece itself
  (record_format.py names them: `encode`, `parse_batch`, `check_labels`...).
{%- else %}
{%- if cookiecutter.data_source == "tfrecord" %}

- `NUM_CLASSES`: `import-images` takes one class folder per class.
{%- endif %}
- `LABEL_SHAPE`: the shape of one example's label (a class index: `()`).
{%- if cookiecutter.data_source == "tfrecord" %}
- `check_labels(low, high)`: why labels from `low` to `high` cannot train
  (here: one is not a class), or None. `index` asks it of every shard's
  smallest and largest label; the framework names the file.
- `FORMAT`, `encode(input, label)`, `parse_batch(records, keys)` and
  `describe_batch(records)`: the record format, the layout of tensorflow/models'
  ImageNet converters (written by `make-data` and `import-images`, checked by
  `index`, parsed a batch of records at a time by `train`, decoding only each
  training crop). A task that declares `FEATURES` (features.py) instead gets
  these from the declaration (record_format.py).
{%- endif %}
- `SERVING_INPUT` and `serving_inputs(received)`: what a client sends to the
  exported model (JPEG bytes) and how it becomes model inputs.
{%- endif %}
- `sample_examples(num_examples, seed)`: seeded (inputs, labels) arrays: the
  sample data, the GPU smoke test's batches, the tests' examples.
- `prepare_batch(inputs, keys)`: a batch of model inputs as parsed -> as the
  model takes them (`keys`: one stateless seed per example for augmentation;
  None in evaluation and serving).
- `summarize_batch(inputs, labels)` and `statistics_from(sums)`: what the model
  learns from the training data before training (a Normalization layer's mean
  and variance, a vocabulary). `summarize_batch` gets numpy batches of model
  inputs as evaluation prepares them and returns sums (a dict of arrays, or
  of {value: count} dicts to learn a vocabulary from), which
  the framework adds up over the training split{% if cookiecutter.data_source == "tfrecord" %} in `index`{% else %} before step 1{% endif %};
  `statistics_from` turns them into the JSON values `build_model` gets, the
  same in training, evaluation and export (statistics.py).

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

Everything random in `prepare_batch`{% if cookiecutter.task == "image" and cookiecutter.data_source == "tfrecord" %} and `parse_batch`{% endif %} draws from `keys`
(stateless ops), so a resumed run sees what an uninterrupted run sees.
"""

import numpy as np
import tensorflow as tf

{% if cookiecutter.task == "tabular" -%}
from {{ cookiecutter.package_name }} import features
{% endif -%}
from {{ cookiecutter.package_name }}.compat import keras
{% include "task/" ~ cookiecutter.task ~ ".py" %}