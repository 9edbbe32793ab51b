"""TF_CONFIG: read and checked before MultiWorkerMirroredStrategy sees it.

TensorFlow reports a malformed TF_CONFIG late and vaguely; these checks name the
field that is wrong.
"""

import json
import os
{%- if cookiecutter.launcher == "slurm" %}
import re
{%- endif %}
{%- if cookiecutter.launcher != "none" %}
import sys
{%- endif %}

from {{ cookiecutter.package_name }} import TrainerError

TASK_TYPES = ("chief", "worker")


class ClusterError(TrainerError):
    pass


def _fail(problem, fix="see docs/clusters.md, TF_CONFIG"):
    raise ClusterError(f"TF_CONFIG {problem} - {fix}")


def parse_tf_config(text):
    """The checked TF_CONFIG dict from its JSON text."""
    try:
        config = json.loads(text)
    except json.JSONDecodeError as err:
        _fail(f"is not valid JSON ({err.msg} at position {err.pos})")
    if not isinstance(config, dict):
        _fail("must be a JSON object with 'cluster' and 'task'")
    cluster = config.get("cluster")
    if not isinstance(cluster, dict) or not cluster:
        _fail("has no 'cluster' object", 'add "cluster": {"worker": ["host:port", ...]}')
    addresses = []
    for task_type, hosts in cluster.items():
        if task_type not in TASK_TYPES:
            _fail(
                f"cluster has an unknown task type {task_type!r}",
                "use " + " or ".join(TASK_TYPES),
            )
        if not isinstance(hosts, list) or not hosts:
            _fail(f"cluster.{task_type} must be a non-empty list of 'host:port'")
        for host in hosts:
            if not isinstance(host, str) or ":" not in host:
                _fail(f"cluster.{task_type} holds {host!r}, not 'host:port'")
            if host in addresses:
                _fail(f"cluster lists the address {host!r} twice", "give every task its own port")
            addresses.append(host)
    task = config.get("task")
    if not isinstance(task, dict):
        _fail("has no 'task' object", 'add "task": {"type": "worker", "index": 0}')
    task_type, index = task.get("type"), task.get("index")
    if task_type not in cluster:
        _fail(
            f"task.type={task_type!r} is not in the cluster",
            "use one of: " + ", ".join(cluster),
        )
    if not isinstance(index, int) or isinstance(index, bool):
        _fail(f"task.index={index!r} is not an integer")
    if not 0 <= index < len(cluster[task_type]):
        _fail(
            f"task.index={index} is out of range for {len(cluster[task_type])} {task_type} task(s)",
            f"use 0 to {len(cluster[task_type]) - 1}",
        )
    return config


def read_tf_config(environ=None):
    """The checked TF_CONFIG from the environment, or None when it is unset."""
    text = (os.environ if environ is None else environ).get("TF_CONFIG", "").strip()
    return parse_tf_config(text) if text else None


def is_chief_task(tf_config):
    """Whether this process is the chief: the "chief" task when the cluster has one,
    else worker 0 (TensorFlow's rule); a process without TF_CONFIG is."""
    if tf_config is None:
        return True
    task, cluster = tf_config["task"], tf_config["cluster"]
    if "chief" in cluster:
        return task["type"] == "chief"
    return task["type"] == "worker" and task["index"] == 0
{%- if cookiecutter.launcher != "none" %}


def print_tf_config(argv, place, flag, default_port, build):
    """The command line of `python -m {{ cookiecutter.package_name }}.distribute.cluster`: print
    TF_CONFIG for `place`, built by `build(port)`; one error line and 2 if it cannot be."""
    import argparse

    parser = argparse.ArgumentParser(description=f"print TF_CONFIG for {place}")
    parser.add_argument(flag, action="store_true", required=True)
    parser.add_argument("--port", type=int, default=default_port)
    args = parser.parse_args(argv)
    try:
        print(json.dumps(build(args.port)))
    except ClusterError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0
{%- endif %}
{% include "distribute/cluster/" ~ cookiecutter.launcher ~ ".py" %}