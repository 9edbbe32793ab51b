"""A resume's time to its first batch, 10% and 90% into a pass, on a data set of
TFRecord shards read from disk, not the page cache, as on a fresh node (the
pages of every shard are dropped before each resume). Run on a baked project
(data_source=tfrecord), from its directory:

    PYTHONPATH=src python ../../benchmarks/resume_cost.py PACKAGE WORKDIR [--gb 2]

The data set is one shard of the sample task's examples, indexed, then copied
to the size asked for, each copy listed in the manifest with the shard's own
entry (indexing 2 GB of the image sample's small JPEGs would decode 1.1 million
of them: 15 minutes here); it prints JSON. `make bench` runs it for each task
(measure.py: 2 GB; 20 MB in quick mode).
"""

import argparse
import importlib
import json
import math
import os
import shutil
import time
from pathlib import Path

# Examples in the shard that is copied: about 10 MB for either sample task (quick: less).
SHARD_EXAMPLES = {"tabular": 100_000, "image": 1_000}
QUICK_SHARD_EXAMPLES = {"tabular": 2_000, "image": 50}
REPEATS = 3


def drop_from_page_cache(paths):
    """Write back and drop each file's cached pages: the next read is from disk."""
    for path in paths:
        descriptor = os.open(path, os.O_RDONLY)
        try:
            os.fsync(descriptor)
            os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(descriptor)


def make_data(package, workdir, gigabytes, shard_examples):
    """One shard of the sample task's examples, indexed, copied to `gigabytes`."""
    sources = importlib.import_module(f"{package}.data.sources")
    manifest = importlib.import_module(f"{package}.data.manifest")
    base, data_dir = workdir / "base", workdir / "data"
    shutil.rmtree(workdir, ignore_errors=True)
    sources.make_data(base, num_files=1, examples=shard_examples)  # indexed
    (shard,) = base.glob("train-*")
    copies = math.ceil(gigabytes * 1e9 / shard.stat().st_size)
    data_dir.mkdir(parents=True)
    for eval_shard in base.glob("eval-*"):
        shutil.copy(eval_shard, data_dir)
    names = [f"train-{index:05d}-of-{copies:05d}.tfrecord" for index in range(copies)]
    for name in names:
        shutil.copy(shard, data_dir / name)
    # The copies hold the shard's records: its manifest entry, under each name.
    listed = json.loads((base / manifest.MANIFEST_NAME).read_text())
    train = listed["splits"]["train"]
    (entry,) = train["files"]
    train["files"] = [{**entry, "file": name} for name in names]
    train["records"] = entry["records"] * copies
    (data_dir / manifest.MANIFEST_NAME).write_text(json.dumps(listed, indent=1))
    manifest.read_manifest(str(data_dir))
    return data_dir, [data_dir / name for name in names]


def measure(package, workdir, strategy, gigabytes, quick=False, repeats=REPEATS):
    """A resume's seconds to its first batch 10% and 90% into a pass, from disk."""
    data = importlib.import_module(f"{package}.data.pipeline")
    training = importlib.import_module(f"{package}.training.assembly")
    config_module = importlib.import_module(f"{package}.config")
    task = importlib.import_module(f"{package}.task")
    kind = "image" if hasattr(task, "IMAGE_SIZE") else "tabular"
    examples = (QUICK_SHARD_EXAMPLES if quick else SHARD_EXAMPLES)[kind]
    data_dir, shards = make_data(package, workdir, gigabytes, examples)
    config = config_module.TrainConfig(model_dir=str(workdir / "runs"), data_dir=str(data_dir))
    plan = training.plan_run(config, strategy)
    steps = plan.shards.steps_per_pass
    total_gb = sum(path.stat().st_size for path in shards) / 1e9

    def first_batch_seconds(fraction):
        drop_from_page_cache(shards)
        start = time.perf_counter()
        next(iter(data.training_input(strategy, plan, config.seed, 0, int(fraction * steps))))
        return time.perf_counter() - start

    seconds = {0.1: float("inf"), 0.9: float("inf")}
    for _ in range(repeats):
        for fraction in seconds:
            seconds[fraction] = min(seconds[fraction], first_batch_seconds(fraction))
    # Reading the whole data set from disk, for scale: what a skip to 90% read before.
    drop_from_page_cache(shards)
    start = time.perf_counter()
    for path in shards:
        path.read_bytes()
    read_seconds = time.perf_counter() - start
    shutil.rmtree(workdir)
    return {
        "task": kind,
        "gb": total_gb,
        "files": len(shards),
        "files_per_block": data.block_width(len(shards)),
        "steps_per_pass": steps,
        "seconds_to_first_batch": {"10%": seconds[0.1], "90%": seconds[0.9]},
        "resume_90_vs_10": seconds[0.9] / seconds[0.1],
        # Seconds per GB of the pass between the two positions: what a skip
        # through them would cost (near 0: a resume reads one block at most).
        "seconds_per_gb": (seconds[0.9] - seconds[0.1]) / (0.8 * total_gb),
        "disk_read_seconds_per_gb": read_seconds / total_gb,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("package")
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--gb", type=float, default=2.0, help="training data to make, in GB")
    args = parser.parse_args()
    strategy_module = importlib.import_module(f"{args.package}.distribute.strategy")
    strategy = strategy_module.make_strategy(cpu_replicas=2)
    print(json.dumps(measure(args.package, args.workdir, strategy, args.gb), indent=1))


if __name__ == "__main__":
    main()
