"""Export for serving: the SavedModel reloads with TensorFlow alone (no Keras, no
project code) and predicts what the trained model predicts."""

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from conftest import LOOPS, load_weights, sample_statistics

from {{ cookiecutter.package_name }}.data import statistics
from {{ cookiecutter.package_name }}.data.record_format import SERVING_INPUT, serving_inputs
from {{ cookiecutter.package_name }}.export import ExportError, export
from {{ cookiecutter.package_name }}.task import build_model, sample_examples, serving_outputs
from {{ cookiecutter.package_name }}.training.assembly import train

# A serving client: a fresh process with TensorFlow alone (Keras and this project
# cannot be imported), which loads the SavedModel and calls its serving_default
# signature on the serialized inputs, each by its name (argv: the model, then
# name:dtype for each input, then where the outputs go).
CLIENT = """
import sys
for name in ("keras", "tf_keras", "{{ cookiecutter.package_name }}"):
    sys.modules[name] = None
import tensorflow as tf
*named, outputs_path = sys.argv[2:]
inputs = {}
for name, dtype in (argument.split(":") for argument in named):
    value = tf.io.read_file(f"{outputs_path}.input.{name}")
    inputs[name] = tf.io.parse_tensor(value, out_type=getattr(tf, dtype))
outputs = tf.saved_model.load(sys.argv[1]).signatures["serving_default"](**inputs)
for name, value in outputs.items():
    tf.io.write_file(f"{outputs_path}.{name}", tf.io.serialize_tensor(value))
"""


def serve_in_a_fresh_process(export_path, inputs, tmp_path, names):
    """The signature's outputs `names`, {name: array}, as a client without Keras
    sees them: it sends `inputs` (SERVING_INPUT's structure) by their names."""
    named = []
    for spec, value in zip(tf.nest.flatten(SERVING_INPUT), tf.nest.flatten(inputs), strict=True):
        path = str(tmp_path / f"outputs.input.{spec.name}")
        tf.io.write_file(path, tf.io.serialize_tensor(value))
        named.append(f"{spec.name}:{spec.dtype.name}")
    environment = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    client = subprocess.run(
        [
            sys.executable,
            "-c",
            CLIENT,
            export_path,
            *named,
            str(tmp_path / "outputs"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=environment,
    )
    assert client.returncode == 0, client.stderr[-3000:]
    return {
        name: tf.io.parse_tensor(
            tf.io.read_file(str(tmp_path / f"outputs.{name}")), tf.float32
        ).numpy()
        for name in names
    }


def requests_and_model_inputs():
    """What a client sends, and what the model sees after the signature's preprocessing."""
    examples, _ = sample_examples(8, seed=3)
{%- if cookiecutter.task == "image" %}
    requests = tf.stack([tf.io.encode_jpeg(image) for image in examples])
{%- else %}
    requests = tf.nest.map_structure(
        lambda spec, values: tf.constant(values, spec.dtype), SERVING_INPUT, examples
    )
{%- endif %}
    return requests, serving_inputs(requests)


@pytest.mark.parametrize("loop", LOOPS)
def test_the_export_reloads_with_tensorflow_alone_and_predicts_like_the_trained_model(
    one_device, sgd_config, tmp_path, loop
):
    config = sgd_config("trained", 16, epochs=1, steps_per_epoch=3{% if cookiecutter.training_loop == "both" %}, loop=loop{% endif %})
    summary = train(config, one_device)
    serving = tmp_path / "serving"
    assert export(config.model_dir, str(serving)) == str(serving / "1")

    requests, model_inputs = requests_and_model_inputs()
    trained = build_model(statistics.load(config.model_dir))
    trained.set_weights(load_weights(summary["weights_path"]))
    predicted = trained(model_inputs, training=False)
    expected = serving_outputs(predicted)
    outputs = serve_in_a_fresh_process(str(serving / "1"), requests, tmp_path, list(expected))
    for name, value in expected.items():
        np.testing.assert_allclose(outputs[name], value, atol=1e-5, err_msg=name)
    # The trained weights, not fresh ones: an untrained model predicts otherwise.
    untrained = build_model(sample_statistics())
    assert not np.allclose(untrained(model_inputs, training=False), predicted, atol=1e-3)

    # The next export is the next version; no partial directory is left.
    assert export(config.model_dir, str(serving)) == str(serving / "2")
    assert sorted(path.name for path in serving.iterdir()) == ["1", "2"]


def test_a_missing_or_unfinished_model_dir_is_refused_in_one_line(tmp_path, cli):
    with pytest.raises(ExportError, match=r"^--model-dir \S+ does not exist - pass"):
        export(str(tmp_path / "missing"))
    unfinished = tmp_path / "unfinished"
    (unfinished / "checkpoints").mkdir(parents=True)
    with pytest.raises(ExportError, match=r"has no final\.weights\.h5: its run has not finished"):
        export(str(unfinished))
    assert not (unfinished / "export").exists()

    result = cli("export", "--model-dir", str(tmp_path / "missing"))
    assert result.returncode == 2
    assert result.stderr.startswith("error: --model-dir ") and result.stderr.count("\n") == 1
{%- if cookiecutter.distribution == "multi_worker" %}


def test_only_the_chief_exports(monkeypatch, tmp_path):
    cluster = '"cluster": {"worker": ["localhost:1", "localhost:2"]}'
    monkeypatch.setenv("TF_CONFIG", "{" + cluster + ', "task": {"type": "worker", "index": 1}}')
    assert export(str(tmp_path / "run"), str(tmp_path / "serving")) is None
    assert not (tmp_path / "serving").exists()
    monkeypatch.setenv("TF_CONFIG", "{" + cluster + ', "task": {"type": "worker", "index": 0}}')
    with pytest.raises(ExportError, match="does not exist"):  # the chief goes on to export
        export(str(tmp_path / "run"), str(tmp_path / "serving"))
{%- endif %}
