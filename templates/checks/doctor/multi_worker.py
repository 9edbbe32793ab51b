

# The network check: how long each peer gets to answer, and the all-reduce it
# times (the size of a gradient pack, strategy.BYTES_PER_PACK).
PEER_TIMEOUT_SECONDS = 10
# How long the workers wait for each other at the end: they come from the last
# check's training steps (collectives) together, and only print after it.
END_WAIT_SECONDS = 60
NETWORK_BYTES = 32 * 2**20
NETWORK_REPEATS = 5
# Between GPU workers, a bus bandwidth below this means the all-reduce is not on
# the fast path (NCCL over TCP sockets or a slow interface, or RING over gRPC):
# 100 Gb/s networking gives about 10 GB/s.
MIN_GPU_BUS_GBPS = 2.0


def check_replicas(config):
    """Every worker's replicas, as TF_CONFIG and each worker's devices give them."""
    del config  # each worker's devices are what it was started with
    strategy = make_strategy()
    workers = worker_count(strategy)
    expected = workers * local_replicas()
    found = strategy.num_replicas_in_sync
    if found != expected:
        raise CheckFailed(
            f"{found} replica(s), expected {expected} ({workers} worker(s) x"
            f" {local_replicas()} device(s)) - check TF_CONFIG and CUDA_VISIBLE_DEVICES"
        )
    return f"{found} replicas on {workers} worker(s)", strategy


def replicas_reading(plan):
    return f"this worker's replicas, {plan.shards.policy.name} sharding"


def check_network(strategy):
    """Every other worker answers within PEER_TIMEOUT_SECONDS, and the all-reduce
    of NETWORK_BYTES runs at a bus bandwidth (nccl-tests' measure: what each
    link carries) the hardware should give."""
    workers = worker_count(strategy)
    if workers == 1:
        return "one worker: no peer to reach", None
    unanswered = [peer for peer in peer_tasks(strategy) if not answers(peer, PEER_TIMEOUT_SECONDS)]
    if unanswered:
        raise CheckFailed(
            f"{', '.join(unanswered)} did not answer within {PEER_TIMEOUT_SECONDS} s - check"
            " that it runs and that this worker reaches its host:port in TF_CONFIG (a"
            " firewall, a wrong address)"
        )
    seconds = all_reduce_seconds(strategy, NETWORK_BYTES, NETWORK_REPEATS)
    replicas = strategy.num_replicas_in_sync
    bus_gbps = 2 * (replicas - 1) / replicas * NETWORK_BYTES / seconds / 1e9
    detail = (
        f"{workers - 1} peer(s) answered; all-reduce of {NETWORK_BYTES // 2**20} MiB over"
        f" {replicas} replicas: {seconds * 1e3:.1f} ms, bus bandwidth {bus_gbps:.2f} GB/s"
    )
    if tf.config.list_physical_devices("GPU") and bus_gbps < MIN_GPU_BUS_GBPS:
        raise CheckWarning(
            f"{detail}, below {MIN_GPU_BUS_GBPS} GB/s - NCCL_DEBUG=INFO shows whether NCCL"
            " fell back to TCP sockets or a slow interface (NCCL_SOCKET_IFNAME and"
            " NCCL_IB_HCA choose them)"
        )
    return detail, None


def all_reduce_seconds(strategy, num_bytes, repeats):
    """The fastest of `repeats` all-reduces of `num_bytes` of float32 per replica,
    after one that traces and sets up the collective."""

    @tf.function
    def all_reduce():
        def replica_fn():
            values = tf.ones([num_bytes // 4], tf.float32)
            return tf.distribute.get_replica_context().all_reduce("sum", values)[:1]

        return strategy.experimental_local_results(strategy.run(replica_fn))

    all_reduce()[0].numpy()
    fastest = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        all_reduce()[0].numpy()  # the host waits for the result
        fastest = min(fastest, time.perf_counter() - started)
    return fastest
