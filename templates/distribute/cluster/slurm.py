

# One host name of a Slurm host list: commas inside [...] do not split it.
HOST_PATTERN = re.compile(r"(?:[^,\[]|\[[^\]]*\])+")
HOST_RANGE = re.compile(r"\[([^\]]*)\]")


def expand_hostlist(text):
    """Slurm's compressed host list, in Slurm's order:
    'gpu[07-09,12],login1' -> ['gpu07', 'gpu08', 'gpu09', 'gpu12', 'login1']."""
    patterns = HOST_PATTERN.findall(text)
    if ",".join(patterns) != text or not text:
        raise ValueError(f"not a Slurm host list: {text!r}")
    return [host for pattern in patterns for host in expand_host(pattern)]


def expand_host(pattern):
    """'node[1-2]-ib[0,1]' -> ['node1-ib0', 'node1-ib1', 'node2-ib0', 'node2-ib1']."""
    match = HOST_RANGE.search(pattern)
    if match is None:
        return [pattern]
    head, rest = pattern[: match.start()], expand_host(pattern[match.end() :])
    hosts = []
    for item in match[1].split(","):
        first, _, last = item.partition("-")
        last = last or first
        if not (first.isdigit() and last.isdigit() and int(first) <= int(last)):
            raise ValueError(f"not a Slurm host range: [{match[1]}]")
        for number in range(int(first), int(last) + 1):
            hosts += [f"{head}{number:0{len(first)}d}{tail}" for tail in rest]
    return hosts


def expand_tasks_per_node(text):
    """Slurm's tasks per node, one count per host: '2(x3),1' -> [2, 2, 2, 1]."""
    counts = []
    for part in text.split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part)
        if match is None:
            raise ValueError(f"not a Slurm tasks-per-node list: {text!r}")
        counts += [int(match[1])] * int(match[2] or 1)
    return counts


def slurm_variable(environ, name):
    try:
        return environ[name]
    except KeyError:
        raise ClusterError(
            f"cannot read the Slurm job: {name} is not set - run this inside srun"
        ) from None


def tf_config_from_slurm(port, environ=None):
    """TF_CONFIG for this Slurm task: one worker per task, in Slurm's task order.

    Slurm numbers a step's tasks node by node, in the order of its node list (the
    default block distribution); the tasks on a node take ports `port`, `port` + 1,
    ... Pure Python: TensorFlow's SlurmClusterResolver would cost its import
    (and C++ start-up lines) in every task, and it sorts host names as text, so
    on node[1-10] worker 1 would be node10 while Slurm runs task 1 on node2.
    """
    environ = os.environ if environ is None else environ
    rank = int(slurm_variable(environ, "SLURM_PROCID"))
    nodelist = slurm_variable(environ, "SLURM_STEP_NODELIST")
    tasks_per_node = slurm_variable(environ, "SLURM_STEP_TASKS_PER_NODE")
    try:
        hosts, counts = expand_hostlist(nodelist), expand_tasks_per_node(tasks_per_node)
    except ValueError as err:
        raise ClusterError(f"cannot read the Slurm job: {err} - run this inside srun") from None
    if len(hosts) != len(counts):
        raise ClusterError(
            f"SLURM_STEP_NODELIST={nodelist!r} names {len(hosts)} node(s) but"
            f" SLURM_STEP_TASKS_PER_NODE={tasks_per_node!r} gives {len(counts)} - run this"
            " inside srun"
        )
    workers = [
        f"{host}:{port + local}"
        for host, count in zip(hosts, counts, strict=True)
        for local in range(count)
    ]
    if not 0 <= rank < len(workers):
        raise ClusterError(f"SLURM_PROCID={rank} is not one of the step's {len(workers)} tasks")
    # Where Slurm says this task runs: it must be where the block order puts it.
    node, local = environ.get("SLURMD_NODENAME"), environ.get("SLURM_LOCALID", "0")
    if node is not None and workers[rank] != f"{node}:{port + int(local)}":
        raise ClusterError(
            f"task {rank} runs on {node} (local task {local}), but the block order of the"
            f" node list puts it at {workers[rank]} - submit with --distribution=block (the"
            " default)"
        )
    config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": rank}}
    return parse_tf_config(json.dumps(config))


def main(argv=None):
    return print_tf_config(argv, "this Slurm task", "--from-slurm", 23456, tf_config_from_slurm)


if __name__ == "__main__":
    sys.exit(main())
