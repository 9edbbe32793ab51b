

def worker_dir(model_dir, strategy):
    """Where this worker writes: the model directory on the chief, a local scratch
    directory of its own elsewhere. Every worker must take part in saving, but only
    the chief's copy is kept: the others' full copies in the shared directory
    would multiply each save's traffic (inside a preemption's grace period). The
    run removes it when it ends; a killed worker's is removed when that worker of
    the same model directory starts again (its name says whose it is)."""
    if is_chief(strategy):
        return model_dir
    resolver = strategy.cluster_resolver
    run = hashlib.sha256(str(model_dir).encode()).hexdigest()[:12]
    prefix = f"{resolver.task_type}-{resolver.task_id}-{run}-"
    for stale in tf.io.gfile.glob(os.path.join(tempfile.gettempdir(), prefix + "*")):
        shutil.rmtree(stale, ignore_errors=True)
    scratch = tempfile.mkdtemp(prefix=prefix)
    log.info(
        "%s %d writes its copies of checkpoints to %s",
        resolver.task_type,
        resolver.task_id,
        scratch,
    )
    return scratch


def remove_worker_dir(path, model_dir):
    if path != model_dir:
        shutil.rmtree(path, ignore_errors=True)
