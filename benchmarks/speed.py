"""Speed of the generated training code on 2 logical CPU replicas.

Bakes a project with both loops and TFRecord data, then measures (same machine,
same moment, so ratios are meaningful even on a noisy shared machine):
  1. the custom engine: examples/s at the default --steps-per-call vs 1 step per call;
  2. the fit engine (the compiled model's train_step under the controller's step
     loop) vs a bare model.fit on the same model and data;
  3. one checkpoint save, in training steps, and its share of a run that saves
     every --checkpoint-every steps (the price of losing at most that many steps);
  4. the start of an epoch resumed at its last step vs at its first (the cost of
     restoring the data position);
  5. startup_20x_data: process start to the first training step with 20x the data
     (same file count) over 1x: flat when planning reads the manifest, not the data;
  6. input_vs_step: the input pipeline alone over the training step alone, in
     examples/s (what the doctor's `input` check compares).
Each contender runs an epoch as the controller runs it (the loss read once per call).

Run: make bench   (or .venv/bin/python benchmarks/speed.py)
"""

import importlib
import json
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
         "project_name=bench trainer", "training_loop=both", "data_source=tfrecord"],
        check=True,
    )
    project = Path(workdir) / "bench-trainer"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "-e", str(project)],
        check=True,
    )
    sys.path.insert(0, str(project / "src"))


def seconds_to_first_step(data_dir, workdir, name):
    """A fresh `train` process: its summary's seconds from start to the first step."""
    summary = Path(workdir) / f"{name}.json"
    subprocess.run(
        [sys.executable, "-m", "bench_trainer", "train", "--cpu-replicas", "2",
         "--epochs", "1", "--steps-per-epoch", "2", "--data-dir", str(data_dir),
         "--model-dir", str(Path(workdir) / name), "--summary-json", str(summary)],
        check=True, capture_output=True,
    )
    return json.loads(summary.read_text())["seconds_to_first_step"]


def main():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    workdir = Path(tempfile.mkdtemp(prefix="bench-"))
    bake_and_install(workdir)
    strategy_module = importlib.import_module("bench_trainer.strategy")
    strategy = strategy_module.make_strategy(cpu_replicas=2)

    import keras
    import tensorflow as tf
    from bench_trainer.checkpointing import Checkpoints, Progress
    from bench_trainer.checks import input_examples_per_second, step_examples_per_second
    from bench_trainer.config import TrainConfig
    from bench_trainer.data import make_data, plan_run, synthetic_examples, training_input
    from bench_trainer.engine_custom import CustomEngine, build_training_state
    from bench_trainer.engine_fit import FitEngine, build_compiled_model
    from bench_trainer.model import build_model

    small, large = workdir / "data-1x", workdir / "data-20x"
    make_data(small, num_files=4, examples=4096)
    make_data(large, num_files=4, examples=20 * 4096)
    config = TrainConfig(model_dir=str(workdir / "runs"), data_dir=str(large))
    global_batch = strategy_module.global_batch_size(strategy, config.per_replica_batch_size)
    examples = tf.data.Dataset.from_tensor_slices(synthetic_examples(16384, seed=0))
    steps = 16384 // global_batch

    def global_batches():
        return examples.batch(global_batch, drop_remainder=True)

    def custom_engine(steps_per_call):
        state = build_training_state(strategy, config)
        return CustomEngine(strategy, state, global_batch, steps_per_call)

    def fit_engine(steps_per_call):
        return FitEngine(strategy, build_compiled_model(strategy, config), steps_per_call)

    def engine_epoch(engine):
        """One epoch as the controller runs it: calls of steps_per_call steps, the
        loss read on the host after each call."""
        iterator = iter(strategy.experimental_distribute_dataset(global_batches()))
        done = 0
        while done < steps:
            count = min(engine.steps_per_call, steps - done)
            loss, _ = engine.train(iterator, tf.constant(count))
            float(loss)
            done += count

    def bare_fit_epoch(model):
        model.fit(global_batches(), epochs=1, verbose=0)

    def rates(contenders):
        """Best examples/s of each (run, subject), timed in alternation so that
        drift on a shared machine hits every contender alike."""
        for run, subject in contenders:
            run(subject)  # trace and warm up
        best = [0.0] * len(contenders)
        for _ in range(REPEATS):
            for index, (run, subject) in enumerate(contenders):
                start = time.perf_counter()
                run(subject)
                best[index] = max(best[index], steps * global_batch / (time.perf_counter() - start))
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

    def checkpoint_seconds(engine):
        """Best time of one checkpoint save of this model and optimizer."""
        progress = Progress(strategy)
        checkpoints = Checkpoints(
            {"model": engine.model, "optimizer": engine.optimizer},
            progress, workdir / "runs", workdir / "runs",
        )
        best = float("inf")
        for _ in range(REPEATS):
            start = time.perf_counter()
            checkpoints.save()
            best = min(best, time.perf_counter() - start)
            progress.global_step.assign_add(1)
        return best

    plan = plan_run(config, strategy)

    def first_batch_seconds(first_step):
        """Time to the first batch of an epoch resumed at `first_step` (best of 3)."""
        best = float("inf")
        for _ in range(REPEATS):
            start = time.perf_counter()
            next(iter(training_input(strategy, plan, 0, 0, first_step)))
            best = min(best, time.perf_counter() - start)
        return best

    def startup_seconds():
        """Best seconds to the first step on 1x and on 20x the data, in alternation."""
        best = {small: float("inf"), large: float("inf")}
        for repeat in range(REPEATS):
            for data_dir in (small, large):
                seconds = seconds_to_first_step(data_dir, workdir, f"{data_dir.name}-{repeat}")
                best[data_dir] = min(best[data_dir], seconds)
        return best[small], best[large]

    grouped, single = rates(
        [(engine_epoch, custom_engine(config.steps_per_call)), (engine_epoch, custom_engine(1))]
    )
    generated_fit, bare_fit = rates(
        [(engine_epoch, fit_engine(config.steps_per_call)), (bare_fit_epoch, bare_model())]
    )
    engine = custom_engine(config.steps_per_call)
    step_seconds = global_batch / grouped
    save_seconds = checkpoint_seconds(engine)
    pass_steps = plan.steps_per_epoch
    fresh, late = first_batch_seconds(0), first_batch_seconds(pass_steps - 1)
    input_rate = max(input_examples_per_second(strategy, config, plan) for _ in range(REPEATS))
    step_rate = max(step_examples_per_second(strategy, config, plan) for _ in range(REPEATS))
    startup_small, startup_large = startup_seconds()
    print(f"replicas: {strategy.num_replicas_in_sync}  global batch: {global_batch}")
    print(
        f"custom engine, {config.steps_per_call} steps/call: {grouped:,.0f} examples/s;"
        f" 1 step/call: {single:,.0f} examples/s; ratio {grouped / single:.2f}x"
    )
    print(
        f"fit engine, {config.steps_per_call} steps/call: {generated_fit:,.0f} examples/s;"
        f" bare model.fit: {bare_fit:,.0f} examples/s; ratio {generated_fit / bare_fit:.2f}x"
    )
    print(
        f"checkpoint save: {save_seconds * 1000:.1f} ms = {save_seconds / step_seconds:.1f}"
        f" training steps; every {config.checkpoint_every} steps that is"
        f" {100 * save_seconds / (save_seconds + config.checkpoint_every * step_seconds):.2f}%"
        " of the run"
    )
    print(
        f"resume at step {pass_steps - 1} of {pass_steps} (20x data, {20 * 4096} examples):"
        f" first batch after {late * 1000:.1f} ms vs {fresh * 1000:.1f} ms at step 0"
        f" ({late / fresh:.1f}x; skip() reads the skipped records, without parsing them)"
    )
    print(
        f"startup_20x_data: first step {startup_large:.2f} s after start on 20x the data vs"
        f" {startup_small:.2f} s on 1x (4 files each): ratio {startup_large / startup_small:.2f}"
    )
    print(
        f"input_vs_step: input pipeline {input_rate:,.0f} examples/s, training step"
        f" {step_rate:,.0f} examples/s: ratio {input_rate / step_rate:.2f}"
    )


if __name__ == "__main__":
    main()
