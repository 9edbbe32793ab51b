

def make_strategy(cpu_replicas=None):
    """MirroredStrategy over every visible GPU, or `cpu_replicas` logical CPUs."""
    return make_local_strategy(cpu_replicas)


def worker_count(strategy):
    return 1


def is_chief(strategy):
    """One machine: this process keeps the checkpoints and writes the summary."""
    return True


def make_any_worker(strategy):
    """flag -> whether any worker's flag is set: on one machine, this process's own."""
    del strategy
    return bool


def make_every_worker(strategy):
    """value -> every worker's value: on one machine, this process's own."""
    del strategy
    return lambda value: [value]
