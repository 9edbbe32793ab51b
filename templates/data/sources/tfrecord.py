"""The data this project trains on: TFRecord shards in the data directory.

Their format is task.py's (data/record_format.py); the manifest (data/manifest.py) lists
them with their record counts. To train on your own data, write it in that
format (or change the task's declaration of it) and run `index`. Planning reads
the manifest, never the data, so start-up does not grow with the data set.
"""

import dataclasses
import logging
import re

import tensorflow as tf

from {{ cookiecutter.package_name }} import task
from {{ cookiecutter.package_name }}.data import manifest, record_format, tfrecords
from {{ cookiecutter.package_name }}.data.pipeline import DataError

log = logging.getLogger(__name__)

# Files read at once: by an evaluation, and by a block of training (data/pipeline.py).
READ_PARALLELISM = 16
# The record shuffle buffer holds serialized records, at most this many bytes of
# them (and at most SHUFFLE_RECORDS): filling it is start-up time and host memory.
SHUFFLE_BYTES = 256 * 2**20
SHUFFLE_RECORDS = 10_000
# The ops whose InvalidArgumentError means a record that does not parse or decode.
INPUT_OP_ERROR = re.compile(r"ParseExample|Decode\w*Jpeg|DecodeImage|jpeg|JPEG")


@dataclasses.dataclass(frozen=True, eq=False)
class RecordSource:
    """TFRecord shards. A record is a serialized example; parsing takes a batch."""

    files: tuple[str, ...]
    counts: tuple[int, ...]
    bytes: int
    # Where the shards and their manifest are (named in errors).
    data_dir: str
    # What `index` learned from these records (data/statistics.py): the training
    # split's; None for evaluation, whose statistics nothing uses.
    learned: dict | None
    # Subtracted from every stored label (1 for 1-based labels).
    label_offset: int = 0

    def records(self, files, seed=None):
        """The records of `files` (indices: a sequence or a tensor); with a seed,
        files and records shuffled."""
        paths = tf.data.Dataset.from_tensor_slices(tf.gather(self.files, files))
        if seed is not None:
            paths = paths.shuffle(
                tf.size(files, out_type=tf.int64), seed=seed, reshuffle_each_iteration=False
            )
        # Several files at once. deterministic=True: the order must be a function of
        # the seed, for exact resume and because DATA sharding has every worker keep
        # every W-th record of the same sequence.
        records = paths.interleave(
            tf.data.TFRecordDataset,
            cycle_length=READ_PARALLELISM,
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
        if seed is None:
            return records
        # Not reshuffled: a block is read once, in the order of its seed alone.
        return records.shuffle(self.shuffle_buffer(), seed=seed, reshuffle_each_iteration=False)

    def shuffle_buffer(self):
        record_bytes = max(self.bytes // max(sum(self.counts), 1), 1)
        return max(1, min(SHUFFLE_RECORDS, SHUFFLE_BYTES // record_bytes))

    def parse(self, records, keys=None):
        """A batch of records, parsed by the task (training: with their keys)."""
        inputs, labels = record_format.parse_batch(records, keys)
        return inputs, labels - self.label_offset

    def statistics(self):
        """The statistics `index` stored in the manifest: no record is read."""
        return self.learned

    def read_error(self, err, epoch, step, on_progress):
        """The error to stop with when a training step failed with `err`, or None
        when the data is not the cause.

        A record that fails its checksum or that the task's format cannot parse mid-run (the
        file changed after `index`, or an older version indexed it): find the file,
        reading the training files in order as `index` does (calling on_progress()
        after each group), and name it. Only an input op's error sends us reading
        the data (a model's shape error must not wait for a scan of hundreds of
        GB). When every file reads, the error stands: a checksum that failed this
        time only (storage, the network) is retryable, not bad data."""
        if isinstance(err, tf.errors.DataLossError):
            reason = manifest.data_loss_reason(err)
        elif isinstance(err, tf.errors.InvalidArgumentError) and INPUT_OP_ERROR.search(str(err)):
            reason = "a record the task's format cannot parse"
        else:
            return None
        log.warning("a training record is corrupt (%s): looking for its file", reason)
        path = manifest.first_corrupt_file(list(self.files), on_progress=on_progress)
        if path is None:
            log.warning("every training file reads: the data is not the cause")
            return None
        return DataError(
            f"{path} has a corrupt record ({reason}) at epoch {epoch + 1}"
            f" step {step} - restore or regenerate it and run `{{ cookiecutter.project_slug }} index"
            f" --data-dir {self.data_dir}`; the last checkpoint is intact"
        )


def load_sources(config):
    """The training and evaluation sources, from the manifest (no record is read)."""
    splits, learned = manifest.load(config.data_dir, config.label_offset)
    return tuple(
        RecordSource(
            files=tuple(shard.path for shard in splits[split]),
            counts=tuple(shard.records for shard in splits[split]),
            bytes=sum(shard.bytes for shard in splits[split]),
            data_dir=config.data_dir,
            learned=learned if split == "train" else None,
            label_offset=config.label_offset,
        )
        for split in ("train", "eval")
    )


def make_data(output_dir, num_files, examples, seed=0):
    """A sample data set in the format `train` reads: train and eval shards, indexed."""
    if num_files < 1 or examples < num_files:
        raise DataError(
            f"--num-files {num_files} --examples {examples}: need at least one file"
            " and one example per file - raise --examples or lower --num-files"
        )
    tf.io.gfile.makedirs(str(output_dir))
    tfrecords.write_split(output_dir, "train", *task.sample_examples(examples, seed), num_files)
    eval_count = max(examples // 4, 1)
    tfrecords.write_split(output_dir, "eval", *task.sample_examples(eval_count, seed + 1), 1)
    manifest.index(str(output_dir))
    log.info("wrote %d train and %d eval examples to %s", examples, eval_count, output_dir)
