

def add_import_command(commands, common):
    import_csv = add_subcommand(
        commands,
        common,
        "import-csv",
        run_import_csv,
        "convert CSV files (a header row, one example a row) into indexed shards",
    )
    import_csv.add_argument("--train", nargs="+", required=True, help="one shard per file")
    import_csv.add_argument("--eval", nargs="+", required=True, help="one shard per file")
    import_csv.add_argument("--label-column", default="label")
    import_csv.add_argument("--output-dir", required=True)
    import_csv.add_argument("--workers", type=positive_int, help="processes (default: CPUs)")


def run_import_csv(args):
    from {{ cookiecutter.package_name }}.importing import import_csv

    started = time.monotonic()
    splits = import_csv(args.output_dir, args.train, args.eval, args.label_column, args.workers)
    print_manifest(args.output_dir, splits, started)
    return 0
