"""One training job, assembled here: the plan, the engine, the controller and
what it is handed (checkpoints, evaluator, input, tracker, watchdog).
`train`, the doctor, gpu-smoke and the benchmarks build their parts with these."""

import functools
import logging
import os

import tensorflow as tf

from {{ cookiecutter.package_name }} import STALLED_EXIT_STATUS
from {{ cookiecutter.package_name }}.config import profile_window
from {{ cookiecutter.package_name }}.data import statistics
from {{ cookiecutter.package_name }}.data.pipeline import (
    evaluation_input,
    held_out_sample,
    make_plan,
    training_input,
)
from {{ cookiecutter.package_name }}.data.sources import load_sources
from {{ cookiecutter.package_name }}.distribute import preemption
from {{ cookiecutter.package_name }}.distribute.compat import keras, random_state
{%- if cookiecutter.mixed_precision != "no" %}
from {{ cookiecutter.package_name }}.distribute.precision import set_precision_policy
{%- endif %}
from {{ cookiecutter.package_name }}.distribute.strategy import (
    describe,
    is_chief,
    make_every_worker,
    worker_count,
)
from {{ cookiecutter.package_name }}.tracking.tracker import make_tracker
from {{ cookiecutter.package_name }}.training.attempts import Attempts
from {{ cookiecutter.package_name }}.training.batch_norm_check import CHECK_BATCHES, check_moving_averages
from {{ cookiecutter.package_name }}.training.checkpointing import (
    Checkpoints,
    Progress,
    kept_checkpoints,
    prepare_model_dir,
    worker_dir,
)
from {{ cookiecutter.package_name }}.training.controller import Controller, Profile
{%- if cookiecutter.training_loop in ("custom", "both") %}
from {{ cookiecutter.package_name }}.training.engine_custom import CustomEngine, build_training_state
{%- endif %}
{%- if cookiecutter.training_loop in ("fit", "both") %}
from {{ cookiecutter.package_name }}.training.engine_fit import FitEngine, build_compiled_model
{%- endif %}
from {{ cookiecutter.package_name }}.training.evaluation import make_evaluator
from {{ cookiecutter.package_name }}.training.optimizer import AveragedWeights, learning_rate_schedule
from {{ cookiecutter.package_name }}.training.run_settings import RunSettings
from {{ cookiecutter.package_name }}.training.watchdog import Watchdog

log = logging.getLogger(__name__)

# TensorFlow's global seed for --seed 0 (see set_global_seed).
SEED_ZERO_TENSORFLOW_SEED = 2**31 - 2


def set_global_seed(seed):
    """Python's, NumPy's, Keras's and TensorFlow's seeds, from `seed`.

    A TensorFlow global seed of 0 with an op seed that is a tensor (the data
    pipeline's per-pass shuffle seeds) fails in tf.random's get_seed
    (OperatorNotAllowedInGraphError), and 0 is a seed users type: seed 0 gets a
    TensorFlow global seed no other seed gives (config.MAX_SEED is below it).
    """
    keras.utils.set_random_seed(seed)
    if seed == 0:
        tf.random.set_seed(SEED_ZERO_TENSORFLOW_SEED)


def prepare_run(config):
    """Seeds, determinism and precision: before any model is built."""
    set_global_seed(config.seed)
    if config.deterministic:
        # Bit-identical reruns and replica copies: scatter-based updates (an
        # Embedding's sparse gradient, on CPUs too) and some GPU reductions
        # round differently from run to run otherwise.
        tf.config.experimental.enable_op_determinism()
        log.info("deterministic ops: on")
{%- if cookiecutter.mixed_precision != "no" %}
    set_precision_policy(config.mixed_precision)
{%- endif %}


def plan_run(config, strategy):
    """The run's data plan for `strategy`, from the sources' record counts alone
    (no record is read): too little data fails here, before any model is built."""
    train, evaluation = load_sources(config)
    return make_plan(
        train,
        evaluation,
        config.per_replica_batch_size,
        strategy.num_replicas_in_sync,
        worker_count(strategy),
        config.steps_per_epoch,
        config.accumulate_steps,
    )


def learning_rate_for(config, plan):
    """The run's learning rate by optimizer step: scaled to the plan's global
    batch, warmed up and decayed over the run's steps (training/optimizer.py)."""
    total_steps = config.epochs * plan.steps_per_epoch
    return learning_rate_schedule(config, plan.global_batch_size, total_steps)


def evaluator_for(config, strategy, plan, engine):
    """The run's evaluation: on the weights' moving averages with --ema-decay,
    as the final model and its export are."""
    evaluate = make_evaluator(strategy, engine.model, evaluation_input(strategy, plan))
    if config.ema_decay is None:
        return evaluate
    return AveragedWeights(engine.model, engine.optimizer).around(evaluate)


def build_controller(config, strategy, plan, engine, learned, model_dir):
    """The controller of a run of `engine`, handed everything else it uses."""
    write_dir = worker_dir(model_dir, strategy)
    window = profile_window(config.profile_steps) if config.profile_steps else None
    progress = Progress(
        strategy,
        {
            "global_batch_size": plan.global_batch_size,
            "workers": plan.shards.num_workers,
            "steps_per_pass": plan.shards.steps_per_pass,
            "steps_per_epoch": plan.steps_per_epoch,
            "seed": config.seed,
        },
    )
    return Controller(
        strategy,
        engine,
        plan,
        config,
        settings=RunSettings(config, model_dir, config.epochs * plan.steps_per_epoch),
        checkpoints=Checkpoints(
            {
                "model": engine.model,
                "optimizer": engine.optimizer,
                # The random layers' generators: a resume draws the masks it would have.
                "random_state": random_state(engine.model),
            },
            progress,
            model_dir,
            write_dir,
            make_every_worker(strategy),
        ),
        evaluate=evaluator_for(config, strategy, plan, engine),
        check_batch_norm=functools.partial(
            check_moving_averages,
            statistics=learned,
            batches=held_out_sample(plan, CHECK_BATCHES),
        ),
        training_input=functools.partial(training_input, strategy, plan, config.seed),
        learning_rate=learning_rate_for(config, plan),
        tracker=make_tracker(config, strategy, plan, model_dir, write_dir),
        watchdog=Watchdog(config.stall_timeout, STALLED_EXIT_STATUS),
        attempts=(
            Attempts(model_dir, config.no_progress_attempts)
            if is_chief(strategy) and preemption.notice.caught_from_start
            else None
        ),
        # Profiled on the chief: every worker runs the same steps.
        profile=Profile(window if is_chief(strategy) else None, os.path.join(write_dir, "logs")),
        model_dir=model_dir,
        write_dir=write_dir,
    )


def train(config, strategy):
    """Train with `strategy` and return the run's summary (a dict)."""
    for line in describe(strategy, config.per_replica_batch_size, config.accumulate_steps):
        log.info(line)
    plan = plan_run(config, strategy)
    log.info(
        "steps per epoch: %d, checkpoint every %d steps",
        plan.steps_per_epoch,
        config.checkpoint_every,
    )
    prepare_run(config)  # first: a refused precision policy leaves no model directory
    resuming = kept_checkpoints(config.model_dir) != []
    learned = statistics.for_run(config.model_dir, plan.train, resuming)
    # The model directory after the engine: a model the engine refuses leaves none.
    engine = build_engine(config, strategy, plan, learned)
    model_dir = prepare_model_dir(config.model_dir)
    if is_chief(strategy):
        statistics.keep(model_dir, learned)
    return build_controller(config, strategy, plan, engine, learned, model_dir).run()
{% include "training/assembly/" ~ cookiecutter.training_loop ~ ".py" %}