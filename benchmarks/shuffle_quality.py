"""How well a pass mixes its shards: the spread of each global batch's label
frequencies from the whole set's, for the training order (blocks of a few
files, each block's records shuffled together) on shards written in label
order, and on shards dealt the examples in a shuffled order (as make-data and
import-csv write them); for the order before blocks (one shuffle over every
file, 16 read at once, the same buffer) on the first; and for a full shuffle
(the floor: a random batch's own spread). Run on a baked
project with data_source=tfrecord, from its directory:

    PYTHONPATH=src python ../../benchmarks/shuffle_quality.py PACKAGE WORKDIR

It prints JSON: the mean total variation distance per batch (0: every batch
holds the classes in the set's proportions; 1: none of them).
"""

import argparse
import importlib
import json
import shutil
from pathlib import Path

import numpy as np

FILES = 64
EXAMPLES = {"tabular": 64_000, "image": 3_200}
BATCH = 128
SEED = 0


def spread(batches, frequencies):
    """Mean total variation distance of each batch's label frequencies."""
    classes = len(frequencies)
    distances = [
        0.5 * np.abs(np.bincount(batch, minlength=classes) / len(batch) - frequencies).sum()
        for batch in map(np.ravel, batches)
    ]
    return float(np.mean(distances))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("package")
    parser.add_argument("workdir", type=Path)
    args = parser.parse_args()

    def module(name):
        return importlib.import_module(f"{args.package}.{name}")

    data, manifest, task, tfrecords = (
        module(name) for name in ("data.pipeline", "data.manifest", "task", "data.tfrecords")
    )
    kind = "image" if hasattr(task, "IMAGE_SIZE") else "tabular"
    features, labels = task.sample_examples(EXAMPLES[kind], SEED)
    frequencies = np.bincount(labels) / len(labels)
    shutil.rmtree(args.workdir, ignore_errors=True)

    def plan_for(data_dir):
        """The training source and a one-worker plan of BATCH, once indexed."""
        tfrecords.write_split(data_dir, "eval", features[:BATCH], labels[:BATCH], 1)
        manifest.index(str(data_dir))
        config = module("config").TrainConfig(model_dir=str(data_dir), data_dir=str(data_dir))
        return data.make_plan(*module("data.sources").load_sources(config), BATCH)

    def block_spread(plan):
        batches = data.worker_batches(plan, SEED, 0, 0)
        return spread([batch_labels.numpy() for _, batch_labels in batches], frequencies)

    # In label order: file i holds the i-th sixty-fourth of the examples sorted.
    in_order = args.workdir / "in-label-order"
    in_order.mkdir(parents=True)
    for index, rows in enumerate(np.array_split(np.argsort(labels, kind="stable"), FILES)):
        part = args.workdir / f"part-{index}"
        part.mkdir()
        (written,) = tfrecords.write_split(part, "train", features[rows], labels[rows], 1)
        shutil.move(written, in_order / f"train-{index:05d}-of-{FILES:05d}.tfrecord")
    sorted_plan = plan_for(in_order)
    train = sorted_plan.train
    whole = train.records(tuple(range(FILES)), seed=SEED).batch(BATCH, drop_remainder=True)
    before = [train.parse(records)[1].numpy() for records in whole]
    # Dealt as make-data and import-csv deal them: in a shuffled order.
    dealt = args.workdir / "dealt"
    dealt.mkdir()
    shuffled = np.random.default_rng(SEED).permutation(len(labels))
    tfrecords.write_split(dealt, "train", features[shuffled], labels[shuffled], FILES)
    floor = [
        labels[shuffled[start : start + BATCH]]
        for start in range(0, len(labels) - BATCH + 1, BATCH)
    ]
    print(
        json.dumps(
            {
                "task": kind,
                "files": FILES,
                "files_per_block": data.block_width(FILES),
                "classes": len(frequencies),
                "global_batch": BATCH,
                "spread": {
                    "in_label_order": {
                        "blocks": block_spread(sorted_plan),
                        "one_shuffle_over_every_file": spread(before, frequencies),
                    },
                    "dealt_shuffled": {"blocks": block_spread(plan_for(dealt))},
                    "full_shuffle": spread(floor, frequencies),
                },
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
