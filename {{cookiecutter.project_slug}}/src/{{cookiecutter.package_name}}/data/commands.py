"""The commands that prepare TFRecord data: `make-data` (a sample set), `index`
(the manifest of existing shards) and `{% if cookiecutter.task == "image" %}import-images` (class folders{% else %}import-csv` (CSV files{% endif %} into shards).
Each handler loads TensorFlow only when it runs, so `--help` stays fast."""

import os
import time

from {{ cookiecutter.package_name }}.arguments import add_subcommand, positive_int


def add_commands(commands, common):
    """The data commands, as subcommands of the project's command line."""
    make_data = add_subcommand(
        commands, common, "make-data", run_make_data, "write a sample TFRecord data set"
    )
    make_data.add_argument("--output-dir", default="data")
    make_data.add_argument("--num-files", type=positive_int, default=4)
    make_data.add_argument("--examples", type=positive_int, default=4096, help="training examples")
    make_data.add_argument("--seed", type=int, default=0)

    index = add_subcommand(
        commands,
        common,
        "index",
        run_index,
        "list existing shards with their record counts in DIR/manifest.json (reads each once)",
    )
    index.add_argument("--data-dir", required=True, help="directory of the shards")
    index.add_argument("--threads", type=positive_int, default=16, help="files read at once")
    for split, flag in (("train", "--train-files"), ("eval", "--eval-files")):
        index.add_argument(
            flag,
            nargs="+",
            metavar="PATTERN",
            help=f"glob(s) of the {split} shards' names (default: manifest.py's SHARD_PATTERNS)",
        )
    add_import_command(commands, common)


def run_make_data(args):
    from {{ cookiecutter.package_name }}.data.sources import make_data

    make_data(args.output_dir, args.num_files, args.examples, args.seed)
    return 0


def run_index(args):
    from {{ cookiecutter.package_name }}.data.manifest import index

    started = time.monotonic()
    given = {"train": args.train_files, "eval": args.eval_files}
    patterns = {split: tuple(globs) for split, globs in given.items() if globs}
    print_manifest(args.data_dir, index(args.data_dir, args.threads, patterns), started)
    return 0


def print_manifest(data_dir, splits, started):
    from {{ cookiecutter.package_name }}.data.manifest import MANIFEST_NAME

    for split, shards in splits.items():
        records = sum(shard.records for shard in shards)
        megabytes = sum(shard.bytes for shard in shards) / 1e6
        print(f"{split}: {len(shards)} files, {records} records, {megabytes:.1f} MB")
    seconds = time.monotonic() - started
    print(f"wrote {os.path.join(data_dir, MANIFEST_NAME)} in {seconds:.1f} s")
{% include "data/commands/" ~ cookiecutter.task ~ ".py" %}