"""`doctor`: checks that distribution really happens in your training code.

It runs the very functions `train` uses (the strategy, the data pipeline, the
engine from training.build_engine, your model and optimizer), on a few batches,
so an edit that breaks synchronisation without any error shows up here, before
it costs days of GPU time. Each check gives one line (checks/report.py); the `input`
check gives WARN (it still passes) when training waits for data{% if cookiecutter.distribution == "multi_worker" %}, and the
`network` check when the all-reduce between GPU workers is slow{% endif %}.
"""

import dataclasses
import time

import tensorflow as tf
{% if cookiecutter.distribution == "mirrored" %}
from {{ cookiecutter.package_name }}.checks.gpu_smoke import check_local_replicas
{%- endif %}
from {{ cookiecutter.package_name }}.checks.probe import compare_with_one_device, run_steps
from {{ cookiecutter.package_name }}.checks.report import CheckFailed, CheckWarning, Report
{%- if cookiecutter.training_loop == "both" %}
from {{ cookiecutter.package_name }}.config import LOOPS
{%- endif %}
from {{ cookiecutter.package_name }}.data.pipeline import training_input, worker_batches
from {{ cookiecutter.package_name }}.distribute.compat import (
    NONE_BROKEN_UPSTREAM,
    broken_upstream,
    is_distributed,
    keras,
)
{%- if cookiecutter.distribution == "multi_worker" %}
from {{ cookiecutter.package_name }}.distribute.strategy import (
    answers,
    check_keras_version,
    finish_together,
    local_replicas,
    make_strategy,
    peer_tasks,
    worker_count,
)
{%- else %}
from {{ cookiecutter.package_name }}.distribute.strategy import check_keras_version
{%- endif %}
from {{ cookiecutter.package_name }}.training.assembly import build_engine, plan_run, prepare_run

SYNC_STEPS = 4
# Steps (and their batches) the input check times.
INPUT_STEPS = 16

# What to do when the checked code crashes in a check.
CRASH_FIXES = {
    "replicas": "check CUDA_VISIBLE_DEVICES and the TensorFlow GPU install (pip install '.[gpu]')",
{%- if cookiecutter.distribution == "multi_worker" %}
    "network": "check TF_CONFIG's addresses and that every worker reaches the others",
{%- endif %}
    "dataset": "check load_sources in data/sources.py and worker_batches in data/pipeline.py",
    "input": "check worker_batches in data/pipeline.py",
    "variables": (
        "build the model, the optimizer (with optimizer.build) and the metrics inside"
        " `with strategy.scope():`"
    ),
    "batch-split": "check that the replica step runs through strategy.run",
    "sync": "run `train` with the same flags to see the full traceback",
    "upstream": "run `train` with the same flags to see the full traceback",
}


def doctor(config):
    """Every check of the training code; a Report whose `passed` says if all passed."""
    report = Report(CRASH_FIXES)
    strategy = report.run("replicas", check_replicas, config)
    if strategy is None:
        for name in ("dataset", "variables", "batch-split", "sync", "upstream", "input"):
            report.not_run(name, "no strategy (see the replicas check)")
        return report
{%- if cookiecutter.distribution == "multi_worker" %}
    report.run("network", check_network, strategy)
    if not report.passed:
        # Every check below runs collectives, which would wait for that worker forever.
        for name in ("dataset", "variables", "batch-split", "sync", "upstream", "input"):
            report.not_run(name, "a worker does not answer (see the network check)")
        return report
{%- endif %}
    plan = report.run("dataset", check_dataset, config, strategy)
{%- if cookiecutter.training_loop == "both" %}
    # Every loop, each under its own check names ("sync (fit)").
    runs = [
        check_training_step(report, strategy, dataclasses.replace(config, loop=loop), plan, loop)
        for loop in LOOPS
    ]
{%- else %}
    runs = [check_training_step(report, strategy, config, plan)]
{%- endif %}
    runs = [run for run in runs if run is not None]
    report.run("upstream", check_upstream, strategy.num_replicas_in_sync, runs)
    # Speed matters once training is right (and measuring it takes seconds).
    if report.passed:
        report.run("input", check_input, strategy, config, plan)
    else:
        report.not_run("input", "a check above failed")
{%- if cookiecutter.distribution == "multi_worker" %}
    # Every worker ran the same collectives to here: leave at once, as a run does.
    finish_together(strategy, END_WAIT_SECONDS)
{%- endif %}
    return report


def check_training_step(report, strategy, config, plan, loop=None):
    """The variables, batch-split and sync checks of the engine `config` builds
    (named after `loop` when the project has two); returns the probe run."""
    variables, batch_split, sync = (
        f"{name} ({loop})" if loop else name for name in ("variables", "batch-split", "sync")
    )
    if plan is None:
        for name in (variables, batch_split, sync):
            report.not_run(name, "the dataset check failed")
        return None
    # One step with the run's own config (its optimizer, its precision).
    run = report.attempt(variables, run_steps, strategy, config, plan, 1)
    if run is None:
        for name in (batch_split, sync):
            report.not_run(name, "the training step failed (see variables)")
        return None
    report.run(variables, check_variables, run)
    split_ok = report.run(batch_split, check_batch_split, run, plan)
    steps = min(SYNC_STEPS, plan.steps_per_epoch)
    report.run(sync, compare_with_one_device, strategy, config, plan, steps, split_ok is not None)
    return run


# The checks, in the order the doctor runs them. Each returns (detail, value)
# or raises CheckFailed.


def check_dataset(config, strategy):
    plan = plan_run(config, strategy)  # the counts: at least one global batch per pass
    per_replica = plan.replica_batch_size
    batches = worker_batches(plan, config.seed, 0, 0)
    batch_dimension = tf.nest.flatten(batches.element_spec)[0].shape[0]
    if batch_dimension != per_replica:
        raise CheckFailed(
            f"a replica's batches have a batch dimension of {batch_dimension}, not"
            f" {per_replica} (global batch {plan.global_batch_size} / {plan.replicas} replicas):"
            " a short batch can leave a replica with no examples - batch with the"
            " per-replica batch size and drop_remainder=True (data.batch_records)"
        )
    first = next(iter(training_input(strategy, plan, config.seed, epoch=0)))
    features = tf.nest.flatten(first)[0]
    sizes = [int(part.shape[0]) for part in strategy.experimental_local_results(features)]
    detail = (
        f"{plan.steps_per_epoch} steps per epoch of global batch {plan.global_batch_size},"
        f" split {sizes} across {replicas_reading(plan)}"
    )
    return detail, plan


def check_input(strategy, config, plan):
    """The input pipeline alone against the training step alone, in examples/s
    on one worker: training waits for data when the pipeline is the slower."""
    input_rate = input_examples_per_second(strategy, config, plan)
    step_rate = step_examples_per_second(strategy, config, plan)
    detail = (
        f"input pipeline {input_rate:,.0f} examples/s, training step {step_rate:,.0f}"
        " examples/s per worker"
    )
    if input_rate < step_rate:
        raise CheckWarning(
            f"{detail}: training is input-bound - read more files at once"
            " (more, smaller shards: a block of up to BLOCK_FILES in data/pipeline.py is read at"
            " once), keep per-record work out of the parser, or move the data closer to"
            " the machines"
        )
    return f"{detail} ({input_rate / step_rate:.1f}x what the step needs)", True


def streaming(plan, steps):
    """The plan with `steps` steps per epoch: the stream runs on across passes."""
    return dataclasses.replace(plan, steps_per_epoch=steps)


def input_examples_per_second(strategy, config, plan):
    """Worker 0's pipeline (every worker's does the same work), after its first
    batch (the shuffle buffer's fill is start-up, not throughput)."""
    batches = INPUT_STEPS * plan.replicas // plan.shards.num_workers
    iterator = iter(worker_batches(streaming(plan, INPUT_STEPS + 1), config.seed, 0, 0))
    next(iterator)
    started = time.perf_counter()
    for _ in range(batches - 1):
        next(iterator)
    return (batches - 1) * plan.replica_batch_size / (time.perf_counter() - started)


def step_examples_per_second(strategy, config, plan):
    """The training step on batches already in memory: its speed without input."""
    prepare_run(config)
    engine = build_engine(config, strategy, plan, plan.train.statistics())
    steps = INPUT_STEPS

    def cached(context):
        worker = context.input_pipeline_id
        batches = worker_batches(streaming(plan, steps), config.seed, 0, 0, worker)
        return batches.cache().repeat()

    iterator = iter(strategy.distribute_datasets_from_function(cached))
    float(engine.train(iterator, tf.constant(steps))[0])  # trace, fill the cache
    started = time.perf_counter()
    float(engine.train(iterator, tf.constant(steps))[0])
    workers = plan.shards.num_workers
    return steps * plan.global_batch_size / workers / (time.perf_counter() - started)


def check_variables(run):
    variables = run.variables()
    local = [
        f"{owner} {variable.name}" for owner, variable in variables if not is_distributed(variable)
    ]
    if local:
        raise CheckFailed(
            f"{len(local)} of {len(variables)} variables are not distributed"
            f" ({', '.join(local[:3])}{', ...' if len(local) > 3 else ''}): they were"
            " created outside strategy.scope(), so each replica updates its own copy"
            " - create the model, the optimizer (and call optimizer.build) and the"
            " metrics inside `with strategy.scope():`"
        )
    return f"all {len(variables)} model, optimizer and metric variables are distributed", True


def check_batch_split(run, plan):
    expected = plan.replica_batch_size
    seen = sorted(run.batch_sizes)
    if seen == [expected]:
        micro_batches = (
            f", {plan.accumulate_steps} micro-batches of {plan.per_replica_batch_size}"
            if plan.accumulate_steps > 1
            else ""
        )
        return (
            f"each replica's step sees {expected} examples (global batch"
            f" {plan.global_batch_size} / {plan.replicas} replicas{micro_batches})",
            True,
        )
    if plan.replicas > 1 and seen == [plan.global_batch_size]:
        raise CheckFailed(
            f"each replica's step sees the whole global batch of {plan.global_batch_size},"
            f" not {expected}: the dataset is not distributed - pass it through"
            " strategy.experimental_distribute_dataset()"
        )
    raise CheckFailed(
        f"the replica step sees batches of {seen}, expected {expected} - batch the"
        " dataset with the global batch size and let the strategy split it"
    )


def check_upstream(replicas, runs):
    """Options that are known to be broken upstream (facts, section 3)."""
    check_keras_version()
    problems = [
        problem for run in runs for problem in broken_upstream(replicas, run.optimizer, run.model)
    ]
    if problems:
        raise CheckFailed("; ".join(dict.fromkeys(problems)))
    return f"{keras.__name__} {keras.__version__}: {NONE_BROKEN_UPSTREAM}", True
{% include "checks/doctor/" ~ cookiecutter.distribution ~ ".py" %}