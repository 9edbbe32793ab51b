

def add_import_command(commands, common):
    import_csv = add_subcommand(
        commands,
        common,
        "import-csv",
        run_import_csv,
        "convert CSV files (a header row, one example a row) into indexed shards",
    )
    import_csv.add_argument("--train", nargs="+", required=True, help="training CSV files")
    import_csv.add_argument("--eval", nargs="+", required=True, help="evaluation CSV files")
    import_csv.add_argument(
        "--label-column",
        help="the column holding the label (default: the label field's name in task.py's FEATURES)",
    )
    import_csv.add_argument("--output-dir", required=True)
    import_csv.add_argument(
        "--num-files",
        type=positive_int,
        help="training shards (default: one per 64 MiB of CSV, a multiple of --for-workers)",
    )
    import_csv.add_argument(
        "--for-workers",
        type=positive_int,
        default=1,
        help="training workers the shards will feed: at least a shard each, as many each",
    )
    import_csv.add_argument("--seed", type=int, default=0, help="of the rows' shuffle")
    import_csv.add_argument("--workers", type=positive_int, help="processes (default: CPUs)")


def run_import_csv(args):
    from {{ cookiecutter.package_name }}.data.importing import import_csv

    started = time.monotonic()
    splits = import_csv(
        args.output_dir,
        args.train,
        args.eval,
        args.label_column,
        args.workers,
        args.num_files,
        args.seed,
        args.for_workers,
    )
    print_manifest(args.output_dir, splits, started)
    return 0
