"""Measure one baked project (one task) on 2 logical CPU replicas; print JSON.

Run by speed.py in a fresh process per task (one TensorFlow, one strategy):
    python benchmarks/measure.py PACKAGE WORKDIR [--quick]

Every training contender runs whole epochs over the same global batches held in
memory (no parsing, no shuffle), traced and warmed up first, then timed in
alternation so drift on a shared machine hits every contender alike; each
figure is the best of the repeats.
"""

import dataclasses
import functools
import importlib
import json
import subprocess
import sys
import time
from pathlib import Path

import resume_cost
import script
import tutorials

# Steps per call that make the per-call cost vanish: the overhead-free bound.
OVERHEAD_FREE_STEPS_PER_CALL = 256
# The training data a resume is timed on, in GB, by task and mode (quick: True).
RESUME_GB = {
    ("tabular", False): 2.0,
    ("tabular", True): 0.02,
    ("image", False): 2.0,
    ("image", True): 0.02,
}
# (examples per epoch, repeats, examples in the 1x startup data set) by task and mode.
SIZES = {
    ("tabular", False): (32768, 5, 4096),
    ("tabular", True): (4096, 1, 512),
    ("image", False): (16384, 3, 1024),
    ("image", True): (512, 1, 256),
}


def seconds_to_first_step(package, data_dir, model_dir):
    """A fresh `train` process: its summary's seconds from start to the first step."""
    summary = Path(f"{model_dir}.json")
    subprocess.run(
        # fmt: off
        [
            sys.executable,
            "-m",
            package,
            "train",
            "--cpu-replicas",
            "2",
            "--epochs",
            "1",
            "--steps-per-epoch",
            "2",
            "--data-dir",
            str(data_dir),
            "--model-dir",
            str(model_dir),
            "--summary-json",
            str(summary),
        ],
        # fmt: on
        check=True,
        capture_output=True,
    )
    return json.loads(summary.read_text())["seconds_to_first_step"]


def measure(package, workdir, quick):
    project = importlib.import_module(package)

    def module(name):
        return importlib.import_module(f"{package}.{name}")

    strategy_module = module("distribute.strategy")
    strategy = strategy_module.make_strategy(cpu_replicas=2)  # before any other TensorFlow op

    problem = module("task")
    task = "image" if hasattr(problem, "IMAGE_SIZE") else "tabular"
    examples_per_epoch, repeats, startup_examples = SIZES[task, quick]

    import tensorflow as tf

    doctor, engine_fit = module("checks.doctor"), module("training.engine_fit")
    sources, training = module("data.sources"), module("training.assembly")

    small, large = workdir / f"{task}-data-1x", workdir / f"{task}-data-20x"
    sources.make_data(small, num_files=4, examples=startup_examples)
    sources.make_data(large, num_files=4, examples=20 * startup_examples)
    config = module("config").TrainConfig(model_dir=str(workdir / "runs"), data_dir=str(large))
    plan = training.plan_run(config, strategy)  # the global batch, decided once
    global_batch = plan.global_batch_size
    learned = plan.train.statistics()  # what index stored
    examples = tf.data.Dataset.from_tensor_slices(problem.sample_examples(examples_per_epoch, 0))
    steps = examples_per_epoch // global_batch
    batches = examples.batch(global_batch, drop_remainder=True).cache()

    def build_engine(loop, **settings):
        """The engine `train` builds (training.build_engine, the one place),
        with the recipe `settings` (the accumulation's plan has its own batch)."""
        run_config = dataclasses.replace(config, loop=loop, **settings)
        run_plan = training.plan_run(run_config, strategy)
        return training.build_engine(run_config, strategy, run_plan, learned)

    # One update of 2 micro-batches: twice the global batch, half the steps.
    accumulated_batch = 2 * global_batch
    assert examples_per_epoch % accumulated_batch == 0
    accumulated_batches = examples.batch(accumulated_batch, drop_remainder=True).cache()

    def epoch_in_calls_of(steps_per_call, batches=batches, steps=steps):
        def engine_epoch(engine):
            """One epoch as the controller runs it: calls of steps_per_call steps,
            the loss read on the host after each call (the only sync)."""
            iterator = iter(strategy.experimental_distribute_dataset(batches))
            done = 0
            while done < steps:
                count = min(steps_per_call, steps - done)
                loss, _ = engine.train(iterator, tf.constant(count))
                float(loss)
                done += count

        return engine_epoch

    def bare_fit_epoch(model):
        model.fit(batches, epochs=1, verbose=0)

    def rates(contenders, repeats=repeats):
        """Best examples/s of each (run, subject), timed in alternation."""
        for run, subject in contenders.values():
            run(subject)  # trace and warm up
        best = dict.fromkeys(contenders, 0.0)
        for _ in range(repeats):
            for name, (run, subject) in contenders.items():
                start = time.perf_counter()
                run(subject)
                rate = steps * global_batch / (time.perf_counter() - start)
                best[name] = max(best[name], rate)
        return best

    build_model = functools.partial(problem.build_model, learned)
    custom_tutorial = tutorials.CustomTrainingTutorial(strategy, build_model, batches)
    fit_tutorial = tutorials.KerasTutorial(strategy, build_model, batches)
    rate = rates(
        {
            "custom": (epoch_in_calls_of(config.steps_per_call), build_engine("custom")),
            "custom_overhead_free": (
                epoch_in_calls_of(OVERHEAD_FREE_STEPS_PER_CALL),
                build_engine("custom"),
            ),
            "custom_tutorial": (tutorials.CustomTrainingTutorial.epoch, custom_tutorial),
            "fit": (epoch_in_calls_of(config.steps_per_call), build_engine("fit")),
            "bare_fit": (
                bare_fit_epoch,
                engine_fit.build_compiled_model(
                    strategy, config, learned, training.learning_rate_for(config, plan)
                ),
            ),
            "fit_tutorial": (tutorials.KerasTutorial.epoch, fit_tutorial),
        }
    )
    # The recipe's per-step costs (issue 22), each against the plain engine
    # timed beside it: the same examples an epoch. A feature's cost is a few
    # percent at most, within a shared machine's noise at 3-5 repeats: 3 times as
    # many (one in quick mode, which proves the bench runs; its figures are not read).
    in_calls = epoch_in_calls_of(config.steps_per_call)
    accumulating = epoch_in_calls_of(
        config.steps_per_call, accumulated_batches, examples_per_epoch // accumulated_batch
    )
    recipe = rates(
        {
            "custom": (in_calls, build_engine("custom")),
            "custom_again": (in_calls, build_engine("custom")),
            "custom_clipped": (in_calls, build_engine("custom", clip_norm=1.0)),
            "custom_ema": (in_calls, build_engine("custom", ema_decay=0.999)),
            "custom_accumulated": (accumulating, build_engine("custom", accumulate_steps=2)),
            "fit": (in_calls, build_engine("fit")),
            "fit_ema": (in_calls, build_engine("fit", ema_decay=0.999)),
            "fit_accumulated": (accumulating, build_engine("fit", accumulate_steps=2)),
        },
        repeats=repeats if quick else 3 * repeats,
    )

    # A checkpoint save against the training steps it costs: the checkpoints a
    # run's controller is handed (training.build_controller).
    engine = build_engine("custom")
    controller = training.build_controller(
        config, strategy, plan, engine, learned, str(workdir / f"{task}-runs")
    )
    checkpoints = controller.checkpoints
    save_seconds = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        checkpoints.save()
        save_seconds = min(save_seconds, time.perf_counter() - start)
        checkpoints.progress.global_step.assign_add(1)
    step_seconds = global_batch / rate["custom"]
    # The replicas' copies compared before each checkpoint (training/replica_sync.py),
    # against the interval of training steps it closes; and the check that
    # finds the largest variable's second copy apart, and repairs it.
    sync = controller.replica_sync
    sync_seconds = repair_seconds = float("inf")
    sync.check()  # traced here, as a run's first checkpoint does
    for _ in range(repeats):
        start = time.perf_counter()
        sync.check()
        sync_seconds = min(sync_seconds, time.perf_counter() - start)
    _, largest = max(sync.mirrored, key=lambda named: named[1].shape.num_elements())
    for repeat in range(repeats + 1):  # the first traces the repair
        copy = strategy.experimental_local_results(largest)[1]
        copy.assign(copy + 1)
        start = time.perf_counter()
        sync.check()
        if repeat:
            repair_seconds = min(repair_seconds, time.perf_counter() - start)

    # A resume 10% and 90% into a pass of RESUME_GB, from disk.
    resume = resume_cost.measure(
        package, workdir / f"{task}-resume", strategy, RESUME_GB[task, quick], quick
    )
    input_rate = max(
        doctor.input_examples_per_second(strategy, config, plan) for _ in range(repeats)
    )
    step_rate = max(doctor.step_examples_per_second(strategy, config, plan) for _ in range(repeats))

    startup = {small: float("inf"), large: float("inf")}
    for repeat in range(repeats):
        for data_dir in (small, large):
            seconds = seconds_to_first_step(
                package, data_dir, workdir / f"{data_dir.name}-{repeat}"
            )
            startup[data_dir] = min(startup[data_dir], seconds)

    return {
        "task": task,
        "package_version": getattr(project, "__version__", None),
        "replicas": strategy.num_replicas_in_sync,
        "global_batch_size": global_batch,
        "steps_per_epoch": steps,
        "steps_per_call": config.steps_per_call,
        "overhead_free_steps_per_call": OVERHEAD_FREE_STEPS_PER_CALL,
        "repeats": repeats,
        "statistic": "best of repeats, after one warm-up epoch",
        "examples_per_second": rate,
        "ratios": {
            "fit_vs_tutorial": rate["fit"] / rate["fit_tutorial"],
            "custom_vs_tutorial": rate["custom"] / rate["custom_tutorial"],
            "fit_vs_bare_fit": rate["fit"] / rate["bare_fit"],
            "custom_vs_overhead_free": rate["custom"] / rate["custom_overhead_free"],
            "startup_20x_data": startup[large] / startup[small],
            "input_vs_step": input_rate / step_rate,
            "resume_90_vs_10_percent": resume["resume_90_vs_10"],
        },
        # Examples/s with a feature on over the plain step's; `off_repeat` is a
        # second plain engine: the noise band (a feature off adds no op).
        "recipe_ratios": {
            "off_repeat": recipe["custom_again"] / recipe["custom"],
            "clipping_custom": recipe["custom_clipped"] / recipe["custom"],
            "ema_custom": recipe["custom_ema"] / recipe["custom"],
            "ema_fit": recipe["fit_ema"] / recipe["fit"],
            "accumulate_2_custom": recipe["custom_accumulated"] / recipe["custom"],
            "accumulate_2_fit": recipe["fit_accumulated"] / recipe["fit"],
        },
        "checkpoint": {
            "save_seconds": save_seconds,
            "save_in_steps": save_seconds / step_seconds,
            "share_of_run": save_seconds / (save_seconds + config.checkpoint_every * step_seconds),
            "checkpoint_every": config.checkpoint_every,
            "sync_check_seconds": sync_seconds,
            "sync_check_share_of_interval": sync_seconds
            / (config.checkpoint_every * step_seconds),
            "sync_repair_seconds": repair_seconds,
        },
        # A resume's first batch 10% and 90% into a pass read from disk, and
        # the seconds per GB of the pass between them (near 0: one block at most).
        "resume_skip": resume,
        "startup_seconds": {"1x": startup[small], "20x": startup[large]},
        "startup_examples_1x": startup_examples,
        "input_examples_per_second": input_rate,
        "step_examples_per_second": step_rate,
    }


if __name__ == "__main__":
    script.run(measure, __doc__)
