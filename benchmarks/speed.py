"""Speed of the generated training code on 2 logical CPU replicas.

Bakes a project with both loops, then measures in one process (same machine,
same moment, so ratios are meaningful even on a noisy shared machine):
  1. custom loop: examples/s at the default --steps-per-call vs 1 step per call;
  2. the generated fit vs a bare model.fit on the same model and data.

Run: make bench   (or .venv/bin/python benchmarks/speed.py)
"""

import importlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPEATS = 3


def bake_and_install(workdir):
    subprocess.run(
        [sys.executable, "-m", "cookiecutter", "--no-input", "-o", str(workdir), str(ROOT),
         "project_name=bench trainer", "training_loop=both"],
        check=True,
    )
    project = Path(workdir) / "bench-trainer"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "-e", str(project)],
        check=True,
    )
    sys.path.insert(0, str(project / "src"))


def main():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    workdir = Path(tempfile.mkdtemp(prefix="bench-"))
    bake_and_install(workdir)
    strategy_module = importlib.import_module("bench_trainer.strategy")
    strategy = strategy_module.make_strategy(cpu_replicas=2)

    import keras
    import tensorflow as tf
    from bench_trainer.config import TrainConfig
    from bench_trainer.data import synthetic_arrays, training_batches
    from bench_trainer.model import build_model
    from bench_trainer.train_custom import build_training_state, make_train_function
    from bench_trainer.train_fit import build_compiled_model

    config = TrainConfig(model_dir=str(workdir / "runs"))
    global_batch = strategy_module.global_batch_size(strategy, config.per_replica_batch_size)
    examples = tf.data.Dataset.from_tensor_slices(synthetic_arrays(16384, seed=0))
    steps = 16384 // global_batch

    def custom_loop_rate(steps_per_call):
        state = build_training_state(strategy, config)
        train_steps = make_train_function(strategy, state, global_batch)
        batches = training_batches(examples, global_batch, seed=0, repeat=True)
        iterator = iter(strategy.experimental_distribute_dataset(batches))
        train_steps(iterator, tf.constant(steps_per_call))  # trace and warm up
        best = 0.0
        for _ in range(REPEATS):
            start = time.perf_counter()
            done = 0
            while done < steps:
                count = min(steps_per_call, steps - done)
                train_steps(iterator, tf.constant(count))
                done += count
            best = max(best, steps * global_batch / (time.perf_counter() - start))
        return best

    def fit_rates(*models):
        """Best examples/s of each model's fit, timed in alternation so that drift
        on a shared machine hits every model alike."""
        batches = training_batches(examples, global_batch, seed=0)
        for model in models:
            model.fit(batches, epochs=1, verbose=0)  # trace and warm up
        best = [0.0] * len(models)
        for _ in range(REPEATS):
            for index, model in enumerate(models):
                start = time.perf_counter()
                model.fit(batches, epochs=1, verbose=0)
                rate = steps * global_batch / (time.perf_counter() - start)
                best[index] = max(best[index], rate)
        return best

    def bare_model():
        with strategy.scope():
            model = build_model()
            model.compile(
                optimizer=keras.optimizers.Adam(0.01),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=["accuracy"],
            )
        return model

    grouped = custom_loop_rate(config.steps_per_call)
    single = custom_loop_rate(1)
    generated_fit, bare_fit = fit_rates(build_compiled_model(strategy, config), bare_model())
    print(f"replicas: {strategy.num_replicas_in_sync}  global batch: {global_batch}")
    print(
        f"custom loop, {config.steps_per_call} steps/call: {grouped:,.0f} examples/s;"
        f" 1 step/call: {single:,.0f} examples/s; ratio {grouped / single:.2f}x"
    )
    print(
        f"generated fit: {generated_fit:,.0f} examples/s; bare model.fit: {bare_fit:,.0f}"
        f" examples/s; ratio {generated_fit / bare_fit:.2f}x"
    )


if __name__ == "__main__":
    main()
