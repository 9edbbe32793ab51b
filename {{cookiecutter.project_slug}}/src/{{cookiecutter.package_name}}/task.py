"""The problem this project trains: your model and data go here, and only here.

This module is yours: it knows nothing about distribution. The framework (the
strategy, sharding, the input pipeline, the engines, evaluation, export, the
doctor) reaches it through these names alone:

- `METRIC_NAME` with `per_example_metric`: the metric reported in training
  and evaluation is the mean of `per_example_metric` over the examples.
{%- if cookiecutter.task == "image" and cookiecutter.data_source == "tfrecord" %}
- `NUM_CLASSES`: `import-images` takes one class folder per class.
{%- endif %}
- `LABEL_SHAPE`: the shape of one example's label (here a class index: `()`;
  a regression target is `()` too, a multi-label target `(NUM_LABELS,)`).
{%- if cookiecutter.data_source == "tfrecord" %}
- `check_labels(low, high)`: why labels from `low` to `high` cannot train
  (here: one is not a class), or None. `index` asks it of every shard's
  smallest and largest label{% if cookiecutter.task == "tabular" %}, `import-csv` of every row's{% endif %}; the framework names
  the file{% if cookiecutter.task == "tabular" %} and line{% endif %}.
{%- endif %}
{%- if cookiecutter.task == "tabular" and cookiecutter.data_source == "tfrecord" %}
- `INPUT_SHAPE`: the shape of one example's input, which `index` checks each
  record holds.
- `example_from_csv(columns, label)`: one CSV row for `import-csv` (`columns`:
  {name: text} of every column but the label's) -> (input, label) for
  `encode`, or a ValueError naming the column it cannot take.
{%- endif %}
- `build_model(statistics)`: a Keras model from inputs to float32 outputs
  (here, logits). The engines
  call it under `strategy.scope()`, so build every variable inside it.
  Evaluation runs it on one blank example (zeros, empty strings) where a
  replica's share of a batch is empty, and counts it for nothing: the model
  must take one.
- `summarize_batch(inputs, labels)` and `statistics_from(sums)`: what the model
  learns from the training data before training (a Normalization layer's mean
  and variance, a vocabulary). `summarize_batch` gets numpy batches of model
  inputs as evaluation prepares them and returns sums (a dict of arrays, or
  of {value: count} dicts to learn a vocabulary from), which
  the framework adds up over the training split{% if cookiecutter.data_source == "tfrecord" %} in `index`{% else %} before step 1{% endif %};
  `statistics_from` turns them into the JSON values `build_model` gets, the
  same in training, evaluation and export (statistics.py).
- `per_example_loss(labels, logits)`: one loss per example (here, against
  labels smoothed by `LABEL_SMOOTHING`). The framework scales it by the global
  batch and adds the model's regularization losses.
- `sample_examples(num_examples, seed)`: seeded (inputs, labels) arrays: the
  sample data, the GPU smoke test's batches, the tests' examples.
- `prepare_batch(inputs, keys)`: a batch of those arrays -> model inputs
  (`keys`: one stateless seed per example for augmentation; None in evaluation).
{%- if cookiecutter.data_source == "tfrecord" %}
- `FORMAT`, `encode(input, label)`, `parse_batch(records, keys)` and
  `describe_batch(records)`: the record format (written by `make-data`,
  checked by `index`, parsed a batch of records at a time by `train`).
{%- endif %}
- `SERVING_INPUT`, `serving_inputs(received)` and `serving_outputs(outputs)`:
  what a client sends to the exported model, how it becomes model inputs, and
  what the model's outputs are returned as (here, logits and probabilities).

Everything random in `prepare_batch`{% if cookiecutter.data_source == "tfrecord" %} and `parse_batch`{% endif %} draws from `keys`
(stateless ops), so a resumed run sees what an uninterrupted run sees.
"""

import numpy as np
import tensorflow as tf

from {{ cookiecutter.package_name }}.compat import keras
{% include "task/" ~ cookiecutter.task ~ ".py" %}