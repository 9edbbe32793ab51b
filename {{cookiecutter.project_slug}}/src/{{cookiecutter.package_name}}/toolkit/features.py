"""The task's record, declared once: each field's name, what it holds, and
which field is the label (the others are the model's inputs).

task.py declares it (TFDS's FeaturesDict, trimmed to what training needs;
every field but the label is an input of the model):

    FEATURES = features.Record(
        {
            "features": features.Tensor(shape=(20,)),
            "label": features.ClassLabel(num_classes=4),
        },
        label="label",
    )

and the framework derives from it what a record format needs (data/record_format.py
picks the task's own function where it defines one instead): writing a record
(`encode`), parsing a batch of them (`parse`), what `index` checks and counts
(`describe`), a CSV row's conversion (`from_csv`), the serving signature
(`serving_input`) and the format's description the manifest keeps.
"""

import math

import numpy as np
import tensorflow as tf

from {{ cookiecutter.package_name }} import TrainerError

# Every JPEG file starts so (the start-of-image marker, then another marker).
JPEG_START = b"\xff\xd8\xff"


class DeclarationError(TrainerError, ValueError):
    """A FEATURES declaration that cannot describe a record (task.py's import stops)."""


class Tensor:
    """Numbers of a fixed shape (`()`: one number): float32, int32 or int64.
    Stored as a float or int64 list; parsed back to `dtype`. `columns`: the CSV
    columns that hold its values, in order (import-csv then leaves out the
    columns no field names)."""

    columns = None

    def __init__(self, shape=(), dtype="float32", columns=None):
        if dtype not in ("float32", "int32", "int64"):
            raise DeclarationError(
                f"Tensor dtype {dtype!r} in task.py's FEATURES is not float32, int32 or int64"
            )
        if not all(isinstance(size, int) and size > 0 for size in shape):
            raise DeclarationError(
                f"Tensor shape {tuple(shape)} in task.py's FEATURES is not fixed: give each"
                " dimension a size (pad or cut variable-length values to it)"
            )
        self.shape, self.dtype = tuple(shape), tf.as_dtype(dtype)
        self.size = math.prod(self.shape)
        if columns is not None:
            if len(columns) != self.size:
                raise DeclarationError(
                    f"Tensor columns {list(columns)} in task.py's FEATURES are not its"
                    f" {self.size} values - name one column a value"
                )
            self.columns = tuple(columns)

    def stored(self):
        return tf.float32 if self.dtype.is_floating else tf.int64

    def feature(self, value):
        values = np.asarray(value).reshape(-1)
        if self.dtype.is_floating:
            return tf.train.Feature(float_list=tf.train.FloatList(value=values))
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values.astype(np.int64)))

    def parsed(self, tensor):
        return tf.cast(tensor, self.dtype)

    def from_text(self, cells):
        """The values CSV cells hold ((where, text) pairs): one a cell, or all of
        them in one cell separated by spaces ("0 1 1 0 0"); or a ValueError
        naming where the cell is."""
        if len(cells) == 1 and self.size != 1:
            where, text = cells[0]
            cells = [(where, part) for part in text.split()]
            if len(cells) != self.size:
                raise ValueError(f"{text!r} in {where} holds {len(cells)} values, not {self.size}")
        if self.dtype.is_integer:
            values = [whole_number(text, where, self.dtype) for where, text in cells]
        else:
            values = [number(text, where) for where, text in cells]
            for (where, text), value in zip(cells, values, strict=True):
                if abs(value) > self.dtype.max:
                    raise ValueError(f"{text!r} in {where} is out of float32's range")
        return np.array(values, self.dtype.as_numpy_dtype).reshape(self.shape)

    def describe(self):
        """Its type, and [N] for a vector (`index` checks the length)."""
        return f"{self.stored().name}{'[N]' if self.shape else ''}"


class ClassLabel(Tensor):
    """A class index in 0..num_classes - 1 (int32, stored as int64)."""

    def __init__(self, num_classes):
        super().__init__((), "int32")
        self.num_classes = num_classes

    def from_text(self, cells):
        """The number a CSV cell holds, as it is: `check` says whether it is a class."""
        where, text = cells[0]
        return np.float64(number(text, where))

    def check(self, low, high):
        """Why labels from `low` to `high` cannot train, or None."""
        for label in (low, high):
            if not float(label).is_integer() or not 0 <= label < self.num_classes:
                return (
                    f"label {label:g} is not a class in 0..{self.num_classes - 1} - fix the"
                    " labels, or the ClassLabel's class count in task.py (on a GPU,"
                    " cross-entropy gives NaN or garbage for such a label, not an error)"
                )
        return None


class Text:
    """One string an example (raw text, a category), stored as bytes."""

    shape, size, dtype, columns = (), 1, tf.string, None

    def stored(self):
        return tf.string

    def feature(self, value):
        if isinstance(value, np.ndarray) and value.shape == ():
            value = value.item()
        if not isinstance(value, (str, bytes)):
            raise ValueError(f"a Text field takes one string, not {type(value).__name__}")
        text = value if isinstance(value, bytes) else value.encode()
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[text]))

    def parsed(self, tensor):
        return tensor

    def from_text(self, cells):
        return np.array(cells[0][1], object)

    def describe(self):
        return "bytes"


class Image(Text):
    """One image, stored as a JPEG file's bytes (as tensorflow/models' ImageNet
    converters store it) and parsed as those bytes: the task's prepare_batch
    decodes them, only each training crop's part (tf.io.decode_and_crop_jpeg)."""

    def feature(self, value):
        """A JPEG file's bytes, kept as they are (encoding again would lose detail
        and time), or uint8 pixels (height, width, 1 or 3), encoded as one."""
        if isinstance(value, (bytes, bytearray, memoryview)):
            value = bytes(value)
            if not value.startswith(JPEG_START):
                raise ValueError(
                    "an Image field takes a JPEG file's bytes, not another format's - decode"
                    " it and give its pixels (uint8), which are encoded as a JPEG"
                )
            return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
        pixels = np.asarray(value)
        if pixels.dtype != np.uint8 or pixels.ndim != 3 or pixels.shape[-1] not in (1, 3):
            raise ValueError(
                f"an Image field takes uint8 pixels (height, width, 1 or 3), not"
                f" {pixels.dtype}{list(pixels.shape)} - scale to 0..255 and cast to uint8"
            )
        jpeg = tf.io.encode_jpeg(pixels, quality=95).numpy()
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[jpeg]))

    def from_text(self, cells):
        raise ValueError(f"{cells[0][0]} is for an Image field - import images with import-images")

    def shapes(self, encoded, decode=True):
        """Each JPEG's shape as training decodes it (3 channels): decoding all of
        it with training's decoder (the whole image as the crop window), so that
        a truncated or corrupt image fails in `index`, not at the step that first
        crops it; with decode=False, from its header alone."""

        def decoded_shape(jpeg):
            height, width = tf.unstack(tf.io.extract_jpeg_shape(jpeg)[:2])
            window = tf.stack([0, 0, height, width])
            return tf.shape(tf.io.decode_and_crop_jpeg(jpeg, window, channels=3))

        return tf.map_fn(
            decoded_shape if decode else tf.io.extract_jpeg_shape,
            encoded,
            fn_output_signature=tf.TensorSpec([3], tf.int32),
        )

    def describe(self):
        return "JPEG"


class Record:
    """A record's fields by name: the label's, and the model's inputs (every
    other field, in the order given)."""

    def __init__(self, fields, label):
        self.fields = dict(fields)
        if label not in self.fields:
            raise DeclarationError(
                f"label {label!r} is not one of the fields {list(self.fields)} of task.py's"
                " FEATURES - name the label's field"
            )
        self.label_name, self.label = label, self.fields[label]
        if isinstance(self.label, Text):
            raise DeclarationError(
                f"label {label!r} in task.py's FEATURES is {type(self.label).__name__} - declare"
                " a ClassLabel or a Tensor"
            )
        self.inputs = {name: field for name, field in self.fields.items() if name != label}
        if not self.inputs:
            raise DeclarationError("task.py's FEATURES has no field but the label - add the inputs")
        classes = [name for name, field in self.inputs.items() if isinstance(field, ClassLabel)]
        if classes:
            raise DeclarationError(
                f"input {classes[0]!r} in task.py's FEATURES is a ClassLabel - declare an input"
                " of class indices as Tensor(dtype='int32')"
            )

    @property
    def label_shape(self):
        return self.label.shape

    @property
    def num_classes(self):
        """The label's class count, or None where the label is not a ClassLabel."""
        return getattr(self.label, "num_classes", None)

    @property
    def description(self):
        """What the manifest records as the format its counts and checks are about."""
        fields = ", ".join(f"{name} {field.describe()}" for name, field in self.fields.items())
        return f"tf.train.Example: {fields}"

    def model_inputs(self, by_name):
        """One input: its value alone; several: the dict by name (as Keras takes them)."""
        if len(self.inputs) == 1:
            return by_name[next(iter(self.inputs))]
        return {name: by_name[name] for name in self.inputs}

    def inputs_by_name(self, inputs):
        if len(self.inputs) == 1:
            return {next(iter(self.inputs)): inputs}
        return inputs

    def encode(self, inputs, label):
        """One example's inputs (an array, or a dict of them) and label -> a record."""
        values = {**self.inputs_by_name(inputs), self.label_name: label}
        missing = [name for name in self.fields if name not in values]
        if missing:
            raise ValueError(f"no value for the field(s) {missing} of task.py's FEATURES")
        feature = {name: field.feature(values[name]) for name, field in self.fields.items()}
        example = tf.train.Example(features=tf.train.Features(feature=feature))
        return example.SerializeToString()

    def parse(self, records):
        """A batch of serialized records -> (model inputs, labels), one
        parse_example call for the batch."""
        parsed = tf.io.parse_example(
            records,
            {
                name: tf.io.FixedLenFeature(field.shape, field.stored())
                for name, field in {**self.inputs, self.label_name: self.label}.items()
            },
        )
        by_name = {name: field.parsed(parsed[name]) for name, field in self.inputs.items()}
        return self.model_inputs(by_name), self.label.parsed(parsed[self.label_name])

    def describe_batch(self, records, decode=True):
        """What `index` learns from a batch of records, whatever they hold: each
        record's count of values in each input field (a record of one image: the
        image's shape, see Image.shapes), its count of label values, and the
        labels."""
        specs = {name: tf.io.RaggedFeature(field.stored()) for name, field in self.fields.items()}
        [(name, image)] = self.inputs.items() if len(self.inputs) == 1 else [(None, None)]
        if isinstance(image, Image):
            specs[name] = tf.io.FixedLenFeature([], tf.string, default_value="")
        parsed = tf.io.parse_example(records, specs)
        labels = parsed[self.label_name]
        if isinstance(image, Image):
            described = image.shapes(parsed[name], decode)
        else:
            described = tf.stack([parsed[name].row_lengths() for name in self.inputs], axis=1)
        return described, labels.row_lengths(), labels.flat_values

    @property
    def input_values(self):
        """{input field: its count of values a record}, which `index` checks each record holds."""
        return {name: field.size for name, field in self.inputs.items()}

    def check_labels(self, low, high):
        """Why labels from `low` to `high` cannot train (a ClassLabel's check), or None."""
        return self.label.check(low, high) if isinstance(self.label, ClassLabel) else None

    def from_csv(self, columns, label):
        """One CSV row ({name: text} of every column but the label's) -> (inputs,
        label) for encode, or a ValueError naming what it cannot take.

        A Tensor's `columns` go to it, and a column named after an input field;
        the other columns, in the file's order, fill the one input field left
        (the sample's 20 feature columns go to its 'features'), or, where no
        field is left, are left out."""
        named = {name: field.columns or (name,) for name, field in self.inputs.items()}
        for field in self.inputs.values():
            absent = [column for column in field.columns or () if column not in columns]
            if absent:
                raise ValueError(f"no column {absent[0]!r} (its columns: {', '.join(columns)})")
        unnamed = [name for name in self.inputs if named[name][0] not in columns]
        claimed = {column for names in named.values() for column in names}
        rest = [(name, text) for name, text in columns.items() if name not in claimed]
        if len(unnamed) > 1:
            raise ValueError(
                f"no column named {unnamed[0]!r} or {unnamed[1]!r} - name each input"
                " field's column after it, but one"
            )
        if unnamed and len(rest) != self.inputs[unnamed[0]].size:
            raise ValueError(
                f"{len(rest)} columns for {unnamed[0]!r}, which holds"
                f" {self.inputs[unnamed[0]].size} values (task.py's FEATURES) - change its"
                " shape, or drop columns"
            )
        by_name = {}
        for name, field in self.inputs.items():
            texts = rest if name in unnamed else [(c, columns[c]) for c in named[name]]
            by_name[name] = field.from_text([(f"column {c!r}", text) for c, text in texts])
        return self.model_inputs(by_name), self.label.from_text([("the label", label)])

    def serving_input(self):
        """The serving signature's input: what a client sends, a batch of inputs."""
        # A signature's input name cannot hold a "/" ("image/encoded").
        specs = {
            name: tf.TensorSpec([None, *field.shape], field.dtype, name=name.replace("/", "_"))
            for name, field in self.inputs.items()
        }
        return self.model_inputs(specs)


def whole_number(text, where, dtype):
    """The integer a CSV cell holds ("7", or "7.0" as some exports write it),
    within `dtype`'s range, or a ValueError."""
    try:
        value = int(text)
    except ValueError:
        value = number(text, where)
        # Beyond 2**53 a float no longer holds every integer: the id would change.
        if not value.is_integer() or abs(value) > 2**53:
            raise ValueError(f"{text!r} in {where} is not a whole number") from None
        value = int(value)
    if not dtype.min <= value <= dtype.max:
        raise ValueError(f"{text!r} in {where} is out of {dtype.name}'s range")
    return value


def number(text, where):
    """The finite number a CSV cell holds, or a ValueError saying `where` it is."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} in {where} is not a number") from None
    # float() takes "nan" and "inf": a model normalized with them trains on NaN.
    if not math.isfinite(value):
        raise ValueError(f"{text!r} in {where} is not a finite number")
    return value
