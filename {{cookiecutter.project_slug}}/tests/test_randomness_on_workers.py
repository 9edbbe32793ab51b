"""Random layers on several workers: every replica of the job, on every worker,
draws its own dropout masks. Workers are separate processes with the same seed
and the same traced graph, so random ops seeded by the graph alone would draw
the same masks on each of them: W workers x G GPUs would get G streams, not W x G.
"""

from conftest import run_on_workers

WORKERS = 2
CALLS = 2
# One worker: the project's strategy, seed and random-layer set-up, then a
# Dropout layer's training-mode output on ones (its mask) at each of CALLS calls.
DRAW_MASKS = f"""
import hashlib

from {{ cookiecutter.package_name }}.distribute.compat import keras, per_replica_randomness
from {{ cookiecutter.package_name }}.distribute.strategy import make_strategy
from {{ cookiecutter.package_name }}.training.assembly import set_global_seed
import tensorflow as tf

strategy = make_strategy()
set_global_seed(7)
with strategy.scope():
    model = keras.Sequential([keras.Input((256,)), keras.layers.Dropout(0.5)])
per_replica_randomness(model)


@tf.function
def forward():
    return strategy.run(lambda: model(tf.ones((4, 256)), training=True))


for _ in range({CALLS}):
    for mask in strategy.experimental_local_results(forward()):
        kept = mask.numpy() > 0
        assert 0 < kept.mean() < 1, "dropout kept all or nothing"
        print("mask", hashlib.sha256(kept.tobytes()).hexdigest()[:16], flush=True)
"""


def test_every_replica_on_every_worker_draws_its_own_masks():
    masks = [
        [line.split()[1] for line in output.splitlines() if line.startswith("mask ")]
        for output, _ in run_on_workers(DRAW_MASKS, WORKERS)
    ]
    assert [len(drawn) for drawn in masks] == [CALLS] * WORKERS, masks
    # Each worker's masks at each call, and its calls: every mask drawn once.
    every_mask = [mask for drawn in masks for mask in drawn]
    assert len(set(every_mask)) == len(every_mask), masks
