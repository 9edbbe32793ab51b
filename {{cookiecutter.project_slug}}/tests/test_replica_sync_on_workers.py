"""The replicas' copies compared and repaired across workers: a copy that
drifted on one worker is found by the checksums every worker gathers, and every
copy on every worker takes the chief's values.
"""

import json

from conftest import run_on_workers

WORKERS = 2
NUDGE = 0.25
# One worker: the project's strategy and a small model; the second worker adds
# NUDGE to its copy of the first kernel, then every worker checks (and repairs)
# and prints what it found and its copy's values afterwards.
CHECK_A_NUDGED_WORKER = f"""
import json

from {{ cookiecutter.package_name }}.distribute.compat import keras, tf_variable
from {{ cookiecutter.package_name }}.distribute.strategy import make_strategy
from {{ cookiecutter.package_name }}.training.replica_sync import ReplicaSync

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
    outputs = run_on_workers(CHECK_A_NUDGED_WORKER, WORKERS)
    found = [json.loads(output.splitlines()[-1]) for output, _ in outputs]
    chief, other = found
    # Both workers saw the nudge (the chief's own copy was never touched), once.
    for worker in found:
        assert abs(worker["found"] - NUDGE) < 1e-6, worker
        assert (worker["found_again"], worker["repairs"]) == (0.0, 1), worker
    # Every copy now holds the chief's values: the nudge is gone from the other.
    assert chief["after"] == chief["before"] == other["after"]
    assert other["before"] == chief["before"]
    _, chief_log = outputs[0]
    found_line = "replica copies of 1 variable(s) differed, by up to 0.25: "
    assert found_line in chief_log, chief_log[-3000:]
