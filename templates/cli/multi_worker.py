

# How long a worker that lost a peer waits before it exits.
LOST_PEER_EXIT_DELAY_SECONDS = 5


class LostPeer(TransientError):
    """A peer stopped answering: retryable, like a preemption (exit 143)."""

    exit_status = preemption.PREEMPTED_EXIT_STATUS


def config_from_args(args):
    """The config file, overridden by the flags given (None: not given)."""
    overrides = config_overrides(args)
    if overrides.pop("cpu_replicas") is not None:
        raise TrainerError(
            "--cpu-replicas does not apply to multi-worker training:"
            " MultiWorkerMirroredStrategy has one CPU replica per worker"
            f" - run several workers instead: {PROG} launch --workers N -- {args.command} ..."
        )
    return load_config(args.config, overrides)


def run_train(args):
    config = config_from_args(args)
    # The strategy first: it must exist before any other TensorFlow op.
    import tensorflow as tf

    from {{ cookiecutter.package_name }}.distribute.strategy import (
        finish_together,
        is_chief,
        lost_worker_message,
        make_strategy,
    )

    strategy = make_strategy()
    if not is_chief(strategy):
        log_to_worker_file(config.model_dir, strategy.cluster_resolver)
    try:
        status = train_to_exit_status(config, strategy)
    except tf.errors.OpError as err:
        message = lost_worker_message(err)
        if message is None:
            raise
        # A moment's wait first, so the lost worker's own end (a stall's 142, a
        # kill) fails its pod before this 143 does.
        time.sleep(LOST_PEER_EXIT_DELAY_SECONDS)
        raise LostPeer(message) from None
    if status in (0, preemption.PREEMPTED_EXIT_STATUS):  # every worker ended there too
        from {{ cookiecutter.package_name }}.training.controller import tail_seconds

        preempted = status == preemption.PREEMPTED_EXIT_STATUS
        finish_together(strategy, tail_seconds(config, preempted))
    return status


def log_to_worker_file(model_dir, resolver):
    """Only the chief prints progress: another worker logs to MODEL_DIR/TASK-N.log
    (a local --model-dir) or to TASK-N.log in the local temporary directory (a
    URL: gs://...), and its console shows warnings and errors only."""
    # A bucket object cannot be appended to: a handler writing through tf.io.gfile
    # would upload the whole log again on every line, or hold lines back and lose
    # the last ones, which explain a crash, when the worker dies.
    folder = tempfile.gettempdir() if is_remote(model_dir) else model_dir
    path = Path(folder) / f"{resolver.task_type}-{resolver.task_id}.log"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        log_file = logging.FileHandler(path)  # appends: a relaunch adds to the same file
    except OSError as err:
        raise TrainerError(
            f"cannot write the worker log {path} ({err.strerror}) - pass a writable --model-dir"
        ) from None
    logging.info("%s %d logs to %s", resolver.task_type, resolver.task_id, path)
    root = logging.getLogger()
    for console in root.handlers:
        console.setLevel(logging.WARNING)
    log_file.setFormatter(logging.Formatter("%(message)s"))
    root.addHandler(log_file)
