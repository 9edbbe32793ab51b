"""The replicas' copies compared and repaired across workers: a copy that
drifted on one worker is found by the checksums every worker gathers, and every
copy on every worker takes the chief's values.
"""

import json
import subprocess
import sys

from {{ cookiecutter.package_name }}.launch import free_ports, worker_environment, worker_tf_configs

WORKERS = 2
NUDGE = 0.25
# One worker: the project's strategy and a small model; the second worker adds
# NUDGE to its copy of the first kernel, then every worker checks (and repairs)
# and prints what it found and its copy's values afterwards.
CHECK_A_NUDGED_WORKER = f"""
import json

from {{ cookiecutter.package_name }}.compat import keras, tf_variable
from {{ cookiecutter.package_name }}.replica_sync import ReplicaSync
from {{ cookiecutter.package_name }}.strategy import make_strategy

strategy = make_strategy()
with strategy.scope():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2), keras.layers.Dense(1)])
kernel = tf_variable(model.trainable_variables[0])
(copy,) = strategy.experimental_local_results(kernel)
before = copy.numpy()
sync = ReplicaSync(strategy, model)
if strategy.cluster_resolver.task_id == 1:
    copy.assign(copy + {NUDGE})
first = sync.check()
second = sync.check()
found = dict(found=first, found_again=second, repairs=sync.repairs)
print(json.dumps(dict(found, before=before.tolist(), after=copy.numpy().tolist())), flush=True)
"""


def test_a_copy_that_drifted_on_one_worker_is_repaired_on_every_worker():
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", CHECK_A_NUDGED_WORKER],
            env=worker_environment(tf_config, "-1"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for tf_config in worker_tf_configs(free_ports(WORKERS))
    ]
    found, logs = [], []
    try:
        for process in processes:
            output, errors = process.communicate(timeout=300)
            assert process.returncode == 0, errors[-3000:]
            found.append(json.loads(output.splitlines()[-1]))
            logs.append(errors)
    finally:
        for process in processes:
            process.kill()
    chief, other = found
    # Both workers saw the nudge (the chief's own copy was never touched), once.
    for worker in found:
        assert abs(worker["found"] - NUDGE) < 1e-6, worker
        assert (worker["found_again"], worker["repairs"]) == (0.0, 1), worker
    # Every copy now holds the chief's values: the nudge is gone from the other.
    assert chief["after"] == chief["before"] == other["after"]
    assert other["before"] == chief["before"]
    assert "replica copies of 1 variable(s) differed, by up to 0.25: " in logs[0], logs[0][-3000:]
