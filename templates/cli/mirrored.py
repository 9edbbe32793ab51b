

def config_from_args(args):
    """The config file, overridden by the flags given (None: not given)."""
    return load_config(args.config, config_overrides(args))


def run_train(args):
    config = config_from_args(args)
    # The strategy first: it must exist before any other TensorFlow op.
    from {{ cookiecutter.package_name }}.distribute.strategy import make_strategy

    return train_to_exit_status(config, make_strategy(config.cpu_replicas))
