"""A record declared once (toolkit/features.py): what the framework derives from it
round-trips every kind of field, and says in one line what it cannot take."""

import numpy as np
import pytest
import tensorflow as tf

from {{ cookiecutter.package_name }} import TrainerError
from {{ cookiecutter.package_name }}.toolkit import features

# Every kind of field, and a multi-value label.
RECORD = features.Record(
    {
        "numbers": features.Tensor(shape=(2, 3), dtype="float32"),
        "ids": features.Tensor(shape=(4,), dtype="int32"),
        "city": features.Text(),
        "tags": features.Tensor(shape=(3,), dtype="int64"),
    },
    label="tags",
)
EXAMPLES = [
    (
        {
            "numbers": np.arange(6, dtype="float32").reshape(2, 3) / (index + 1),
            "ids": np.array([index, 1, 2, 3], "int32"),
            "city": ["Lyon", "Oslo", "Zürich"][index],
        },
        np.array([index % 2, 1, 0]),
    )
    for index in range(3)
]


def records(examples=EXAMPLES):
    return tf.constant([RECORD.encode(inputs, label) for inputs, label in examples])


def test_a_batch_parses_back_to_each_input_in_its_dtype_and_shape():
    inputs, labels = RECORD.parse(records())
    assert list(inputs) == ["numbers", "ids", "city"]  # the model's, in order
    assert inputs["numbers"].dtype == tf.float32 and inputs["numbers"].shape == (3, 2, 3)
    assert inputs["ids"].dtype == tf.int32 and inputs["ids"].shape == (3, 4)
    assert inputs["city"].dtype == tf.string and inputs["city"].shape == (3,)
    assert labels.dtype == tf.int64 and labels.shape == (3, 3)
    for index, (example, label) in enumerate(EXAMPLES):
        np.testing.assert_array_equal(inputs["numbers"][index], example["numbers"])
        np.testing.assert_array_equal(inputs["ids"][index], example["ids"])
        assert inputs["city"][index].numpy().decode() == example["city"]
        np.testing.assert_array_equal(labels[index], label)


def test_one_input_is_its_tensor_not_a_dict_and_a_class_label_is_int32():
    record = features.Record(
        {"x": features.Tensor(shape=(2,)), "y": features.ClassLabel(3)}, label="y"
    )
    inputs, labels = record.parse(tf.constant([record.encode(np.array([1.0, 2.0]), 2)]))
    np.testing.assert_array_equal(inputs, [[1.0, 2.0]])
    assert labels.dtype == tf.int32 and labels.numpy().tolist() == [2]
    assert record.serving_input() == tf.TensorSpec([None, 2], tf.float32, name="x")
    assert record.description == "tf.train.Example: x float32[N], y int64"
    assert record.label_shape == ()


def test_index_counts_each_inputs_values_and_the_labels():
    shorter = ({**EXAMPLES[0][0], "ids": np.array([1, 2], "int32")}, EXAMPLES[0][1])
    counts, label_counts, labels = RECORD.describe_batch(records([*EXAMPLES[:2], shorter]))
    assert counts.numpy().tolist() == [[6, 4, 1], [6, 4, 1], [6, 2, 1]]
    assert label_counts.numpy().tolist() == [3, 3, 3]
    assert labels.numpy().tolist() == [0, 1, 0, 1, 1, 0, 0, 1, 0]
    assert RECORD.input_values == {"numbers": 6, "ids": 4, "city": 1}


def test_the_serving_input_is_the_models_inputs_by_name():
    specs = RECORD.serving_input()
    assert specs == {
        "numbers": tf.TensorSpec([None, 2, 3], tf.float32, name="numbers"),
        "ids": tf.TensorSpec([None, 4], tf.int32, name="ids"),
        "city": tf.TensorSpec([None], tf.string, name="city"),
    }


def test_a_csv_row_fills_named_fields_and_the_one_left_in_column_order():
    record = features.Record(
        {
            "numbers": features.Tensor(shape=(3,)),
            "city": features.Text(),
            "label": features.ClassLabel(4),
        },
        label="label",
    )
    row = {"age": "31", "city": "Oslo", "income": "2.5", "visits": "7"}
    inputs, label = record.from_csv(row, "3")
    np.testing.assert_array_equal(inputs["numbers"], [31.0, 2.5, 7.0])
    assert inputs["city"] == "Oslo" and label == 3
    with pytest.raises(ValueError, match=r"^2 columns for 'numbers', which holds 3 values"):
        record.from_csv({"age": "31", "city": "Oslo", "visits": "7"}, "3")
    with pytest.raises(ValueError, match=r"^'n/a' in column 'income' is not a number$"):
        record.from_csv({**row, "income": "n/a"}, "3")
    with pytest.raises(ValueError, match=r"^'nan' in column 'age' is not a finite number$"):
        record.from_csv({**row, "age": "nan"}, "3")
    assert record.check_labels(0, 3) is None
    assert record.check_labels(0, 4).startswith("label 4 is not a class in 0..3 - fix the labels")


def test_a_tensor_that_names_its_columns_takes_them_and_other_columns_are_left_out():
    record = features.Record(
        {
            "numbers": features.Tensor(shape=(2,), columns=("income", "age")),
            "city": features.Text(),
            "label": features.ClassLabel(2),
        },
        label="label",
    )
    row = {"id": "x-17", "age": "31", "city": "Oslo", "notes": "NaN", "income": "2.5"}
    inputs, _ = record.from_csv(row, "1")
    np.testing.assert_array_equal(inputs["numbers"], [2.5, 31.0])  # in the declared order
    with pytest.raises(ValueError, match=r"^no column 'income' \(its columns: id, age, city"):
        record.from_csv({key: text for key, text in row.items() if key != "income"}, "1")
    with pytest.raises(features.DeclarationError, match=r"columns \['age'\] .* not its 2 values"):
        features.Tensor(shape=(2,), columns=("age",))


def test_a_field_of_several_values_takes_one_column_of_them_separated_by_spaces():
    record = features.Record(
        {"tokens": features.Tensor(shape=(3,), dtype="int32"), "tags": features.Tensor((2,))},
        label="tags",
    )
    tokens, tags = record.from_csv({"tokens": "4 0 17"}, "1 0")
    assert tokens.dtype == np.int32 and tokens.tolist() == [4, 0, 17]
    assert tags.tolist() == [1.0, 0.0]
    with pytest.raises(ValueError, match=r"^'4 0' in column 'tokens' holds 2 values, not 3$"):
        record.from_csv({"tokens": "4 0"}, "1 0")
    with pytest.raises(ValueError, match=r"^'2.5' in column 'tokens' is not a whole number$"):
        record.from_csv({"tokens": "4 2.5 1"}, "1 0")
    assert record.from_csv({"tokens": "4.0 0 17"}, "1 0")[0].tolist() == [4, 0, 17]
    with pytest.raises(ValueError, match=r"^'3000000000' in column 'tokens' is out of int32's"):
        record.from_csv({"tokens": "4 3000000000 1"}, "1 0")
    with pytest.raises(ValueError, match=r"^'1e39' in the label is out of float32's range$"):
        record.from_csv({"tokens": "4 0 17"}, "1 1e39")


def test_a_text_field_takes_one_string_not_anything_it_could_print():
    record = features.Record({"text": features.Text(), "y": features.ClassLabel(2)}, label="y")
    texts, _ = record.parse(tf.constant([record.encode("café", 1), record.encode(b"tea", 0)]))
    assert texts.numpy().tolist() == ["café".encode(), b"tea"]
    with pytest.raises(ValueError, match="a Text field takes one string, not dict"):
        record.encode({"text": "hello"}, 1)


def test_an_image_is_stored_as_a_jpeg_and_a_jpeg_file_as_it_is():
    record = features.Record({"image": features.Image(), "y": features.ClassLabel(2)}, label="y")
    rows, columns = np.mgrid[0:16, 0:24]
    pixels = np.stack([rows * 8, columns * 5, rows + columns], axis=-1).astype(np.uint8)
    jpeg = tf.io.encode_jpeg(pixels, quality=50).numpy()
    images, labels = record.parse(tf.constant([record.encode(pixels, 1), record.encode(jpeg, 0)]))
    assert images.dtype == tf.string and labels.numpy().tolist() == [1, 0]
    assert images[1].numpy() == jpeg  # not encoded again: no second loss
    decoded = tf.io.decode_jpeg(images[0]).numpy()
    assert decoded.shape == pixels.shape and np.abs(decoded - pixels.astype(int)).mean() < 4
    assert record.description == "tf.train.Example: image JPEG, y int64"
    with pytest.raises(ValueError, match="'image' is for an Image field - import images with"):
        record.from_csv({"image": "cat.jpg"}, "1")


@pytest.mark.parametrize(
    "image, message",
    [
        (np.zeros((4, 4, 3), np.float32), r"uint8 pixels \(height, width, 1 or 3\), not float32"),
        (np.zeros((4, 4), np.uint8), r"uint8 pixels .*, not uint8\[4, 4\]"),
        (b"\x89PNG\r\n\x1a\n", "a JPEG file's bytes, not another format's"),
    ],
    ids=["floats", "no-channels", "png"],
)
def test_an_image_the_record_cannot_hold_is_refused(image, message):
    record = features.Record({"image": features.Image(), "y": features.ClassLabel(2)}, label="y")
    with pytest.raises(ValueError, match=message):
        record.encode(image, 1)


def test_the_formats_existing_manifests_name_are_described_as_they_were():
    # A manifest records its format's description: the samples' must not change.
    tabular = features.Record(
        {"features": features.Tensor((20,)), "label": features.ClassLabel(4)}, label="label"
    )
    assert tabular.description == "tf.train.Example: features float32[N], label int64"
    imagenet = features.Record(
        {"image/encoded": features.Image(), "image/class/label": features.ClassLabel(4)},
        label="image/class/label",
    )
    assert imagenet.description == "tf.train.Example: image/encoded JPEG, image/class/label int64"
    # Its served input is named without the "/" a signature cannot hold.
    assert imagenet.serving_input().name == "image_encoded"


@pytest.mark.parametrize(
    "fields, label, message",
    [
        ({"x": features.Tensor()}, "y", r"label 'y' is not one of the fields \['x'\] of task"),
        ({"x": features.Text(), "y": features.Text()}, "y", "label 'y' in task.py's .* is Text"),
        ({"x": features.Text(), "y": features.Image()}, "y", "label 'y' in .* is Image - declare"),
        ({"x": features.Tensor()}, "x", "FEATURES has no field but the label - add the inputs"),
        (
            {"x": features.ClassLabel(3), "y": features.Tensor()},
            "y",
            r"input 'x' in .* is a ClassLabel - declare .* as Tensor\(dtype='int32'\)",
        ),
    ],
    ids=["unknown-label", "text-label", "image-label", "no-input", "class-label-input"],
)
def test_a_declaration_that_cannot_describe_a_record_is_refused_in_one_line(fields, label, message):
    with pytest.raises(features.DeclarationError, match=message):
        features.Record(fields, label=label)


@pytest.mark.parametrize(
    "shape, dtype, message",
    [
        ((), "float64", "Tensor dtype 'float64' in task.py's FEATURES is not float32, int32"),
        ((None,), "int32", r"Tensor shape \(None,\) in .* is not fixed: give each dimension"),
        ((-1,), "int32", r"Tensor shape \(-1,\) in .* is not fixed"),
    ],
    ids=["float64", "variable-length", "negative"],
)
def test_a_tensor_the_record_cannot_hold_is_refused_in_one_line(shape, dtype, message):
    with pytest.raises(features.DeclarationError, match=message):
        features.Tensor(shape, dtype)
    # One line of the project's own errors, as every command prints them.
    assert issubclass(features.DeclarationError, TrainerError)
