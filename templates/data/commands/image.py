

def add_import_command(commands, common):
    import_images = add_subcommand(
        commands,
        common,
        "import-images",
        run_import_images,
        "convert a folder of class folders of images into indexed shards",
    )
    import_images.add_argument("--source", required=True, help="one folder per class")
    import_images.add_argument(
        "--eval-source", help="class folders of evaluation images (default: hold out a share)"
    )
    import_images.add_argument(
        "--eval-fraction", type=float, default=0.1, help="share held out without --eval-source"
    )
    import_images.add_argument("--output-dir", required=True)
    import_images.add_argument("--num-files", type=positive_int, help="training shards")
    import_images.add_argument("--workers", type=positive_int, help="processes (default: CPUs)")
    import_images.add_argument("--seed", type=int, default=0)


def run_import_images(args):
    from {{ cookiecutter.package_name }}.data.importing import import_images

    started = time.monotonic()
    classes, splits = import_images(
        args.output_dir,
        args.source,
        args.eval_source,
        args.eval_fraction,
        args.num_files,
        args.workers,
        args.seed,
    )
    print(f"classes 0..{len(classes) - 1}: {', '.join(classes)}")
    print_manifest(args.output_dir, splits, started)
    return 0
