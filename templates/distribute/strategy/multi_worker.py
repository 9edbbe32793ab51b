

# Gradients are all-reduced in packs of this size: a few large messages, not
# one per variable (latency, not bandwidth, bounds many small ones).
BYTES_PER_PACK = 32 * 2**20
# How long the chief waits at the end of a run for the other workers to be gone
# (they leave as soon as they pass the end barrier).
PEERS_GONE_SECONDS = 60


def make_strategy():
    """MultiWorkerMirroredStrategy from TF_CONFIG (a single worker without it).

    Must run before any other TensorFlow op.
    """
    check_versions()
    cluster = read_tf_config()
    if cluster is None:
        log.info("TF_CONFIG is not set: running as a single worker")
    options = communication_options(bool(tf.config.list_physical_devices("GPU")))
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    log.info(
        "all-reduce: %s, gradients packed into %d MiB messages",
        options.implementation.name,
        options.bytes_per_pack // 2**20,
    )
    return strategy


# A collective (gradient all-reduce, synchronized batch normalization, the
# preemption flag, a checkpoint) aborted because a peer is gone. TensorFlow says
# it as UnavailableError or AbortedError (a worker that died, or the chief and
# its coordination service: "failed to connect to all addresses"), or as
# FailedPreconditionError when a peer restarted mid-run (a new incarnation).
PEER_ERRORS = (tf.errors.UnavailableError, tf.errors.AbortedError)
PEER_RESTARTED = re.compile(r"has restarted|incarnation", re.IGNORECASE)
# Where the message names the lost task: missed heartbeats (the coordination
# service), the strategy's health check (every 30 s), a failed call to it.
LOST_TASK = re.compile(
    r"unhealthy \(stopped sending heartbeats\):\s*(/job:\w+/replica:\d+/task:\d+)"
    r"|check alive failed, (/job:\w+/replica:\d+/task:\d+) is down"
    r"|remote target (/job:\w+/replica:\d+/task:\d+)"
    r"|(/job:\w+/replica:\d+/task:\d+)"
)


def lost_worker_message(err):
    """One line for TensorFlow's abort of the collectives when a peer is lost;
    None for an error that is not about a peer (a bug in this worker)."""
    peer_restarted = isinstance(err, tf.errors.FailedPreconditionError) and PEER_RESTARTED.search(
        err.message
    )
    if not (isinstance(err, PEER_ERRORS) or peer_restarted):
        return None
    found = LOST_TASK.search(err.message)
    task = next(group for group in found.groups() if group) if found else None
    peer = f"the worker {task}" if task else "a peer worker"
    return (
        f"{peer} stopped answering ({type(err).__name__}: {first_line(err, 160)}), so"
        " TensorFlow aborted the all-reduce - see that worker's log; restarting the job"
        " resumes every worker from the last checkpoint"
    )


def communication_options(gpus):
    """How the workers all-reduce: NCCL between GPUs, RING (gRPC) between CPUs;
    many small gradients packed into few messages.

    No `timeout_seconds`: TensorFlow starts a thread per collective for it (its
    docs: for debugging only). A dead worker is noticed without it, by missed
    heartbeats (8 s after a SIGKILL in a 2-worker run) or else the strategy's
    health check (every 30 s), which abort the collectives: see
    lost_worker_message.
    """
    implementation = tf.distribute.experimental.CommunicationImplementation
    return tf.distribute.experimental.CommunicationOptions(
        bytes_per_pack=BYTES_PER_PACK,
        implementation=implementation.NCCL if gpus else implementation.RING,
    )


def worker_count(strategy):
    resolver = strategy.cluster_resolver
    if resolver is None:  # a single-machine strategy (tests use them as references)
        return 1
    cluster = resolver.cluster_spec().as_dict()
    return sum(len(cluster.get(task_type, [])) for task_type in ("chief", "worker")) or 1


def is_chief(strategy):
    """The worker whose checkpoints and exports are kept: the "chief" task when the
    cluster has one, else worker 0 (TensorFlow's own rule)."""
    return strategy.extended.should_checkpoint


def peer_tasks(strategy):
    """The other tasks of the cluster, as TensorFlow names them."""
    resolver = strategy.cluster_resolver
    return [
        f"/job:{task_type}/replica:0/task:{index}"
        for task_type, hosts in resolver.cluster_spec().as_dict().items()
        for index in range(len(hosts))
        if (task_type, index) != (resolver.task_type, resolver.task_id)
    ]


def answers(peer, timeout_seconds):
    """Whether `peer` answers TensorFlow's own health probe (the one
    MultiWorkerMirroredStrategy's health check sends; not public API)."""
    from tensorflow.python.eager import context

    try:
        context.context().check_collective_ops_peer_health(
            peer, timeout_in_ms=int(timeout_seconds * 1000)
        )
    except (
        tf.errors.UnavailableError,
        tf.errors.DeadlineExceededError,
        tf.errors.FailedPreconditionError,  # a peer that restarted is another one
    ):
        return False
    return True


def finish_together(strategy, tail_seconds):
    """Leave a run that ended on every worker (done, or saved for a SIGTERM) at
    once, the chief last.

    The chief runs TensorFlow's coordination service. A worker that leaves while
    the chief still works stops sending it heartbeats, and a worker whose
    heartbeat finds the chief gone fails it: either way a clean run's log ends
    with "BaseCollectiveExecutor::StartAbort ... The tasks have crashed"
    (tensorflow/tensorflow#58434). So the workers meet at a barrier after the
    chief's last write, waiting for it as long as the chief's tail may take
    (`tail_seconds`: its final save to shared storage is slower than theirs to
    local scratch), and the chief waits there until the others are gone.
    """
    if worker_count(strategy) == 1:
        return
    from tensorflow.python.eager import context

    try:
        context.context().wait_at_barrier("run ended", int(tail_seconds * 1000))
    except tf.errors.OpError as err:  # a peer died after its last step: still a clean end here
        log.warning("the other workers did not all reach the end of the run: %s", first_line(err))
        return
    if not is_chief(strategy):
        return
    deadline = time.monotonic() + PEERS_GONE_SECONDS
    for peer in peer_tasks(strategy):
        while time.monotonic() < deadline and answers(peer, timeout_seconds=1):
            time.sleep(0.1)


def make_any_worker(strategy):
    """flag -> whether any worker's flag is set. Every worker calls it at the same
    step boundaries (a collective: a worker that did not would stall the others)."""

    @tf.function
    def flags_set(flag):
        # This worker's flag on each of its replicas, summed over every replica.
        per_replica = strategy.experimental_distribute_values_from_function(
            lambda context: tf.identity(flag)
        )
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    return lambda flag: float(flags_set(tf.constant(float(flag)))) > 0


def make_every_worker(strategy):
    """value -> every worker's value (a list, in worker order). Every worker calls
    it at the same point (a collective: a worker that did not would stall the
    others). One worker gathers nothing (and a process that holds several
    single-machine strategies, as the tests do, mixes no collective groups)."""
    workers = worker_count(strategy)
    if workers == 1:
        return lambda value: [value]
    replicas_per_worker = strategy.num_replicas_in_sync // workers

    @tf.function
    def gathered(value):
        per_replica = strategy.experimental_distribute_values_from_function(
            lambda context: tf.reshape(tf.identity(value), [1])
        )
        return strategy.gather(per_replica, axis=0)

    def every_worker(value):
        # float64 holds any step count exactly; each worker's replicas are together.
        values = gathered(tf.constant(float(value), tf.float64)).numpy()
        return [int(values[index]) for index in range(0, len(values), replicas_per_worker)]

    return every_worker
