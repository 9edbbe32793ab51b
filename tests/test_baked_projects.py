"""Slow tier: install baked projects and run their own test suites.

6 combinations (the least that can: the image task meets each of 3 precisions),
chosen so that every pair of values of the options that change the training
code (task, loop, distribution, Keras package, data source, mixed precision) is
trained in some project, and every launcher and tracking is baked: each
project's tests check the behaviour its options give, and the pairs are where
options meet (the image task's synchronized batch normalization on several
workers, float16 loss scaling in the custom loop, TFRecord input on tf_keras,
MLflow tracking on 2 replicas and on 2 workers).
"""

import itertools
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, bake

import rules

KEYS = (*rules.CODE_OPTIONS, "tracking")
COMBINATIONS = [
    dict(zip(KEYS, values, strict=True))
    for values in (
        # The image projects, then the tabular ones: --slow-shard's round robin
        # (parallel CI jobs) spreads each kind evenly, and in make test the
        # heaviest, the tabular multi-worker suite, starts while the first two run.
        ("image", "both", "multi_worker", "keras3", "tfrecord", "bfloat16", "slurm",
         "tensorboard"),
        ("image", "both", "multi_worker", "tf_keras", "synthetic", "float16", "kubernetes",
         "tensorboard"),
        ("image", "both", "mirrored", "keras3", "synthetic", "no", "none", "tensorboard"),
        ("tabular", "custom", "multi_worker", "tf_keras", "tfrecord", "no", "kubernetes",
         "mlflow"),
        ("tabular", "fit", "mirrored", "tf_keras", "synthetic", "bfloat16", "slurm",
         "tensorboard"),
        ("tabular", "custom", "mirrored", "keras3", "tfrecord", "float16", "none", "mlflow"),
    )
]
# The options whose pairs the matrix covers (the launcher only adds files).
PAIRED = ("task", "training_loop", "distribution", "keras_package", "data_source",
          "mixed_precision")


def combination_id(options):
    return "-".join(options.values())


# The framework's own tests (the controller, the launchers, the cluster set-up,
# the CLI, the config; the kill, preemption and restart tests, marker
# `processes`; the doctor's checks of broken training code; the refusals of a
# run that cannot resume) exercise code that is the same for every task (the
# second-task test below runs a project on another task) and most options: they
# take two thirds of a tabular suite's time and more of an image one's. The
# tabular projects run them: between them every loop, distribution, Keras
# package, data source, precision and launcher. The image projects run what
# depends on their options (data, model, equivalence, an exact resume, the
# doctor on the generated code and on per-replica batch normalization, export;
# on several workers, the two-worker equivalence runs of test_launch.py), which
# keeps the slow tier within its time on 2 cores.
FULL_SUITES = (
    "tabular-custom-multi_worker-tf_keras-tfrecord-no-kubernetes-mlflow",
    "tabular-fit-mirrored-tf_keras-synthetic-bfloat16-slurm-tensorboard",
    "tabular-custom-mirrored-keras3-tfrecord-float16-none-mlflow",
)
# The multi-worker suite, the heaviest, leaves to the mirrored full suites what
# is the same code on every distribution: MLflow's kill, server-stop, tracker
# and registration tests (it keeps its tracked run on 2 workers, compared with
# TensorBoard), and import-csv (its own 2-worker runs read TFRecord shards). Its
# one-process SIGTERM run is what its 2-worker SIGTERM test in test_launch.py
# does to a whole cluster, resumed exactly. It keeps its one-process kill (the
# recipe's optimizer state, accumulation and averages resumed exactly, in the
# default precision, the custom loop on tf_keras), which no other project runs
# there.
MULTI_WORKER_SUITE = "tabular-custom-multi_worker-tf_keras-tfrecord-no-kubernetes-mlflow"
LEFT_TO_THE_MIRRORED_SUITES = (
    "test_mlflow_tracking.py::test_a_run_killed_mid_epoch_resumes_into_the_same_mlflow_run",
    "test_mlflow_tracking.py::test_a_server_stopped_mid_run_costs_one_warning_and_gets_the_rest_later",
    "test_mlflow_tracking.py::test_a_resumed_tracker_keeps_each_step_once_the_first_value",
    "test_mlflow_tracking.py::test_an_unreachable_server_warns_once_and_keeps_the_values",
    "test_mlflow_tracking.py::test_a_server_that_never_answers_holds_up_no_record_nor_a_preemption",
    "test_mlflow_tracking.py::test_values_a_server_missed_while_down_are_sent_when_it_answers_again",
    "test_mlflow_tracking.py::test_a_run_that_stops_before_training_leaves_its_mlflow_run_as_it_was",
    "test_mlflow_tracking.py::test_a_run_whose_creation_was_cut_short_is_found_by_its_key_not_made_twice",
    "test_mlflow_tracking.py::test_a_run_the_server_stored_after_the_retry_looked_is_deleted_at_the_end",
    "test_mlflow_tracking.py::test_export_registers_a_model_version_that_names_its_run",
    "test_mlflow_tracking.py::test_export_refuses_a_registration_it_cannot_make_before_writing",
    "test_importing.py",
    "test_resume.py::test_sigterm_saves_exits_143_and_the_rerun_resumes_exactly",
    # Its fault cases in make test stop a run that makes no progress on 2 workers.
    "test_resume.py::test_a_sigterm_during_a_resumes_skip_exits_143_without_waiting_for_it",
    "test_resume.py::test_attempts_killed_before_any_progress_stop_the_run_in_one_line",
    # One-process tests of code no option changes: the data layer (its own
    # 2-worker runs read TFRecord shards in test_launch.py), the controller's
    # loop, the run settings' comparison and the final batch-norm check; and
    # those its 2-worker tests run on a cluster: a stall (a hung worker) and a
    # drifted copy repaired (on every worker).
    "test_tfrecords.py",
    "test_data.py",
    "test_manifest.py",
    "test_preflight.py::test_shards_without_a_manifest_are_refused_until_indexed",
    "test_preflight.py::test_a_record_corrupted_mid_run_stops_in_one_line_naming_its_file",
    "test_controller.py",
    "test_run_settings.py",
    "test_batch_norm_check.py::test_a_run_ends_with_the_check_of_its_final_model",
    "test_resume.py::test_a_stalled_run_exits_142_saying_where_and_the_rerun_resumes_exactly",
    "test_replica_sync.py::test_a_copy_that_drifted_is_repaired_to_the_chiefs_at_the_next_checkpoint",
)
FRAMEWORK_TESTS = (
    "test_attempts.py",
    "test_cluster.py",
    "test_config.py",
    "test_controller.py",
    "test_features.py",
    "test_heads.py",
    "test_kubernetes.py",
    "test_preflight.py",
    "test_progress.py",
    "test_recipe.py",
    "test_run_settings.py",
    "test_slurm.py",
    "test_strategy.py",
)


FRAMEWORK_CASES = (
    "test_cli.py",
    "test_doctor.py::test_loss_averaged_over_the_local_batch_fails_sync",
    "test_doctor.py::test_loss_reduced_with_mean_fails_sync",
    "test_doctor.py::test_dataset_not_distributed_fails_batch_split_and_sync",
    "test_doctor.py::test_fit_built_outside_the_scope_fails_variables",
    "test_doctor.py::test_custom_loop_state_built_outside_the_scope_fails_variables",
    "test_doctor.py::test_an_input_bound_pipeline_gives_a_warning_with_both_figures",
    "test_doctor.py::test_doctor_command_fails_when_a_check_fails",
    "test_doctor.py::test_copies_apart_warn_of_the_kernels_or_fail_not_as_a_scope_error",
    "test_replica_sync.py::test_a_copy_that_drifted_is_repaired_to_the_chiefs_at_the_next_checkpoint",
    "test_resume.py::test_a_url_model_dir_holds_the_whole_run_which_resumes_and_exports_from_it",
    "test_resume.py::test_a_finished_run_restarted_has_nothing_left_to_train",
    "test_resume.py::test_nan_loss_stops_training_and_keeps_the_last_good_checkpoint",
    "test_resume.py::test_a_blow_up_rolls_back_to_the_last_checkpoint_skips_its_batches_and_finishes",
    "test_resume.py::test_blow_ups_past_the_recovery_trials_stop_in_one_line",
    "test_resume.py::test_bad_batches_in_calls_in_a_row_each_roll_back_while_trials_last",
    "test_resume.py::test_a_rollback_leaves_the_undone_steps_out_of_the_recorded_loss",
    "test_resume.py::test_an_epoch_whose_every_step_is_rolled_back_stops_the_run_in_one_line",
    "test_resume.py::test_a_checkpoint_of_the_first_layout_resumes_saying_what_stands_in",
    "test_resume.py::test_a_checkpoint_of_a_later_layout_is_refused_in_one_line",
    "test_resume.py::test_a_model_dir_whose_storage_does_not_answer_is_retryable_not_bad_input",
    "test_resume.py::test_a_checkpoint_of_another_model_is_refused_in_one_line",
    "test_resume.py::test_a_checkpoint_read_the_storage_did_not_answer_is_retried_not_passed_over",
    "test_resume.py::test_storage_that_never_answers_stops_the_run_retryably",
    "test_resume.py::test_resuming_with_another_global_batch_is_refused_and_the_same_one_continues",
    "test_resume.py::test_a_damaged_checkpoint_state_file_is_refused_not_retried",
    "test_custom_loop.py::test_a_loss_scaled_by_the_local_batch_fails_the_comparison",
    # The training order's blocks and resumes, on a source of row indices.
    "test_data.py::test_a_resume_at_any_step_lands_on_the_uninterrupted_batches",
    "test_data.py::test_a_resumes_progress_filter_holds_the_block_it_lands_in_only",
    "test_custom_loop.py::test_xla_compiled_step_trains_like_the_plain_step",
    "test_statistics.py::test_a_fresh_run_takes_the_datas_statistics_over_an_earlier_runs",
    "test_statistics.py::test_statistics_that_are_not_finite_are_refused_in_one_line",
    # import-csv's own machinery (its command line, its conversion processes);
    # the examples keep what their labels meet: their rows in the shards, their
    # bad rows and headers refused, their CSV through import-csv to train.
    "test_importing.py::test_the_import_csv_command_writes_and_refuses_in_one_line",
    "test_importing.py::test_the_first_failure_stops_the_conversion_and_leaves_no_shard",
    # The engines' step loop, the checkpoint manager's fallback and the export's
    # refusals do not depend on the task: the image projects keep the custom
    # loop's exact resume from an older checkpoint.
    "test_fit.py::test_several_steps_per_call_equal_one_step_per_call",
    "test_custom_loop.py::test_several_steps_per_call_equal_one_step_per_call",
    "test_fit.py::test_gradient_clipping_on_two_replicas_equals_one_device",
    "test_custom_loop.py::test_gradient_clipping_on_two_replicas_equals_one_device",
    "test_resume.py::test_an_unreadable_newest_checkpoint_resumes_exactly_from_the_previous_one[fit]",
    "test_resume.py::test_random_layers_killed_mid_epoch_resume_to_the_uninterrupted_weights",
    "test_doctor.py::test_a_model_with_random_layers_passes_sync",
    "test_statistics.py::test_export_without_the_runs_statistics_names_the_file",
    "test_export.py::test_a_missing_or_unfinished_model_dir_is_refused_in_one_line",
    "test_gpu_smoke.py::test_gpu_smoke_without_a_gpu_says_so",
    # The doctor's multi-worker checks (the replicas, the network); the image
    # projects run the doctor's training-step checks in one process.
    "test_launch.py::test_two_workers_pass_the_doctor_and_leave_together",
    # Every planned step on 2 workers with uneven files: the plan is the data's.
    "test_launch.py::test_two_workers_run_every_planned_step_on_awkward_shapes",
)


# The fault tier (make test-faults: 5 minutes here) is left to its own target but
# for these cases, which make test runs in the multi-worker suite: the restart
# budget on 2 workers, and a SIGTERM to a worker that is PID 1 while it starts.
FAULT_CASES_IN_MAKE_TEST = (
    "test_faults.py::test_a_node_that_dies_on_every_attempt_stops_the_run_in_one_line",
    "test_faults.py::test_a_sigterm_at_start_up_to_a_worker_that_is_pid_1",
)


def left_out(options):
    """pytest arguments that leave tests out of this combination's run."""
    if combination_id(options) in FULL_SUITES:
        if combination_id(options) != MULTI_WORKER_SUITE:
            return []
        kept = " or ".join(case.rpartition("::")[2] for case in FAULT_CASES_IN_MAKE_TEST)
        return [
            *(f"--deselect=tests/{case}" for case in LEFT_TO_THE_MIRRORED_SUITES),
            # Every test outside test_faults.py, and the cases above.
            "-k", f"not test_faults or {kept}",
        ]
    return [
        "-m",
        "not processes and not slurm",
        *(f"--ignore=tests/{name}" for name in FRAMEWORK_TESTS),
        *(f"--deselect=tests/{case}" for case in FRAMEWORK_CASES),
    ]


def generated_tests(options):
    """The test files a bake with these options has."""
    context = {**options, "package_name": "p", "ci_provider": "none", "license": "MIT"}
    return {path for path in rules.expected_files(context) if path.startswith("tests/")}


LOOPS_OF = {"fit": ("fit",), "custom": ("custom",), "both": ("fit", "custom")}


def trained(combinations):
    """Each combination once per loop it trains with."""
    return [
        {**options, "training_loop": loop}
        for options in combinations
        for loop in LOOPS_OF[options["training_loop"]]
    ]


def test_the_fault_cases_make_test_runs_exist():
    text = (ROOT / "{{cookiecutter.project_slug}}" / "tests" / "test_faults.py").read_text()
    for case in FAULT_CASES_IN_MAKE_TEST:
        assert f"def {case.rpartition('::')[2]}(" in text, case


def test_make_test_runs_named_slow_cases_and_what_the_multi_worker_suite_leaves():
    assert set(IN_MAKE_TEST) <= {*map(combination_id, COMBINATIONS), *EXAMPLES}
    # Its MLflow and import-csv cases run in a mirrored full suite of make test.
    kept = [c for c in COMBINATIONS if combination_id(c) in IN_MAKE_TEST]
    assert any(
        combination_id(c) in FULL_SUITES
        and (c["distribution"], c["tracking"], c["data_source"])
        == ("mirrored", "mlflow", "tfrecord")
        for c in kept
    )


def test_slow_matrix_covers_every_value():
    assert all(rules.is_supported(c) for c in COMBINATIONS)
    assert {c["launcher"] for c in COMBINATIONS} == set(rules.CHOICES["launcher"])
    tracked = [c for c in COMBINATIONS if c["tracking"] == "mlflow"]
    assert {c["distribution"] for c in tracked} == set(rules.CHOICES["distribution"])
    # What the multi-worker suite leaves out, a mirrored full suite runs.
    assert MULTI_WORKER_SUITE in FULL_SUITES
    mirrored_suites = [c for c in COMBINATIONS if combination_id(c) in FULL_SUITES
                       and c["distribution"] == "mirrored"]
    multi_worker = [c for c in COMBINATIONS if combination_id(c) == MULTI_WORKER_SUITE]
    assert [c["distribution"] for c in multi_worker] == ["multi_worker"]
    for case in LEFT_TO_THE_MIRRORED_SUITES:
        name = case.partition("::")[0]
        assert any(
            c["training_loop"] in ("custom", "both") and f"tests/{name}" in generated_tests(c)
            for c in mirrored_suites
        ), case
    assert all(combination_id(c) in FULL_SUITES for c in tracked)  # its `processes` tests
    projects = trained(COMBINATIONS)
    for first, second in itertools.combinations(PAIRED, 2):
        for pair in itertools.product(rules.CHOICES[first], rules.CHOICES[second]):
            if "both" in pair:
                continue  # "both" trains as fit and as custom
            assert any((p[first], p[second]) == pair for p in projects), (first, second, pair)
    full_suites = [c for c in COMBINATIONS if combination_id(c) in FULL_SUITES]
    assert {combination_id(c) for c in full_suites} == set(FULL_SUITES)
    for name in ("distribution", "keras_package", "data_source", "mixed_precision", "launcher"):
        assert {c[name] for c in full_suites} == set(rules.CHOICES[name]), name
    assert {c["training_loop"] for c in trained(full_suites)} == {"fit", "custom"}
    # Multi-worker file sharding (test_launch.py) needs TFRecord files.
    assert any(
        c["distribution"] == "multi_worker" and c["data_source"] == "tfrecord"
        for c in full_suites
    )
    # Only test files that some bakes generate are left out.
    tests = {Path(path).name for path in [*rules.ALWAYS_FILES, *rules.CONDITIONAL_FILES]}
    assert set(FRAMEWORK_TESTS) <= tests
    # Each case left out names tests that exist (a renamed test would run again).
    template_tests = ROOT / "{{cookiecutter.project_slug}}" / "tests"
    for case in (*FRAMEWORK_CASES, *LEFT_TO_THE_MIRRORED_SUITES):
        name, _, test = case.partition("::")
        text = (template_tests / name).read_text(encoding="utf-8")
        assert not test or f"def {test.partition('[')[0]}(" in text, case
    assert set(TASK_AGNOSTIC_TESTS) <= {
        Path(path).name for path in rules.expected_files({**SECOND_TASK, "package_name": "p",
                                                           "ci_provider": "none",
                                                           "license": "MIT"})
    }
    assert RANDOM_LAYERS_RESUME in FRAMEWORK_CASES
    for case in (case for cases in EXAMPLE_TESTS.values() for case in cases):
        name, _, test = case.partition("::")
        text = (template_tests / name).read_text(encoding="utf-8")
        assert not test or f"def {test}(" in text, case
    for example, options in EXAMPLES.items():
        files = rules.expected_files({**options, "package_name": "p", "ci_provider": "none",
                                      "license": "MIT"})
        assert f"examples/{example}" in files, example


# What make test runs of the slow tier, within its 45 minutes on 2 cores (48
# with the mixed-inputs example and the gpu-check dry run, now left out): the
# multi-worker and the float16 full suites (every framework test; between them
# both Keras packages, TFRecord input, MLflow on 2 workers and on 2 replicas,
# the two-worker fault cases) and the image task on several workers (both
# loops, synchronized batch normalization, bfloat16, Slurm). The rest of the
# matrix, the worked examples and the gpu-check dry run (marker `extended`) run
# in make test-slow.
IN_MAKE_TEST = (
    MULTI_WORKER_SUITE,
    "tabular-custom-mirrored-keras3-tfrecord-float16-none-mlflow",
    "image-both-multi_worker-keras3-tfrecord-bfloat16-slurm-tensorboard",
)


def slow_cases(cases, name):
    """`cases` as parameters, those not IN_MAKE_TEST marked `extended`."""
    return [
        pytest.param(
            case,
            id=name(case),
            marks=() if name(case) in IN_MAKE_TEST else pytest.mark.extended,
        )
        for case in cases
    ]


@pytest.mark.slow
@pytest.mark.parametrize("options", slow_cases(COMBINATIONS, combination_id))
def test_baked_project_passes_its_own_tests(cookies, options):
    # Each under its own name, so the editable installs do not replace each other.
    name = f"slow {COMBINATIONS.index(options) + 1:02d}"
    result = bake(cookies, project_name=name, **options)
    assert result.exit_code == 0, result.exception
    project = Path(result.project_path)
    install(project)
    output = passes_its_own_tests(project, left_out(options))
    # A tracking server that cannot start skips its tests: here it must start.
    assert "mlflow server did not start" not in output, output[-3000:]


def install(project):
    """pip install -e, without dependencies (the template's environment has them)."""
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
         "--no-build-isolation", "-e", str(project)],
        capture_output=True,
        text=True,
    )
    assert installed.returncode == 0, installed.stderr


def passes_its_own_tests(project, pytest_arguments):
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore",
         *pytest_arguments],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=2400,
    )
    assert tests.returncode == 0, tests.stdout[-6000:] + tests.stderr[-3000:]
    assert " passed" in tests.stdout.splitlines()[-1]
    return tests.stdout


# The framework does not depend on the sample task: a project whose task.py is
# replaced by a worked example from its examples/ passes its equivalence, resume,
# evaluation, export and doctor tests unchanged. The examples: another problem
# (token ids, not float features; an Embedding model; 5 classes; its own record
# format and augmentation; top-2 accuracy), a regression (a float target, its
# head, label check and dropout, on tf_keras), a multi-label problem (a label
# of shape (5,)), a model of numeric and string columns from its CSV to
# serving, raw text, and a deep backbone after augmentation layers: random
# layers of both Keras packages, whose exact resume, per-replica draws and
# equivalence with one device are what the random-layer machinery is for.
SECOND_TASK = {
    "task": "tabular",
    "training_loop": "both",
    "distribution": "mirrored",
    "keras_package": "keras3",
    "data_source": "tfrecord",
    "mixed_precision": "float16",
    "launcher": "none",
    "tracking": "tensorboard",
}
EXAMPLES = {
    # A deep keras.applications backbone (MobileNetV3Small) after Keras 3's Random*
    # augmentation layers, whose float rounding grows through its layers step
    # after step; trained from class folders. The heaviest, so first: the two
    # test workers finish together.
    "backbone_task.py": {
        **SECOND_TASK,
        "task": "image",
        "training_loop": "custom",
        "mixed_precision": "no",
    },
    "token_task.py": SECOND_TASK,
    # A regression (float targets, MSE, MAE), trained from its own CSV; its
    # Dropout on tf_keras (random layers by its tf.random.Generator path), both loops.
    "regression_task.py": {**SECOND_TASK, "keras_package": "tf_keras", "mixed_precision": "no"},
    # Multi-label (a 0/1 vector per example, sigmoid cross-entropy per tag).
    "multilabel_task.py": SECOND_TASK,
    # Several inputs, numbers and strings (vocabularies learned), from a CSV to serving.
    "mixed_inputs_task.py": SECOND_TASK,
    # Raw text: a vocabulary of the training split's words, an Embedding and a GRU.
    "text_task.py": SECOND_TASK,
}
TASK_AGNOSTIC_TESTS = (
    "test_fit.py",
    "test_custom_loop.py",
    "test_loss_scaling.py",
    "test_resume.py",
    "test_evaluation.py",
    "test_export.py",
    "test_doctor.py",
    "test_randomness.py",
    "test_statistics.py",
)
# What an example runs besides: a CSV task's data through import-csv to train, a
# text task's strings through the record format and the pipelines.
EXTRA_TESTS = {
    "regression_task.py": ("test_importing.py",),
}
# The example whose project passes its whole suite but the tests that kill or
# restart training processes (the tabular suites run those): raw text, the
# first task of their own many users bring, and the proof that no test
# assumes the sample task.
WHOLE_SUITE_EXAMPLES = ("text_task.py",)
# The multi-input example as a user runs it: a CSV of numbers and strings (and a
# column it does not use) through import-csv, train and export, then served
# from raw values, a city it never saw included (its vocabulary's unknown index).
FROM_CSV_TO_SERVING = """
import csv, json, subprocess, sys
import numpy as np
import tensorflow as tf
from PACKAGE import task

def write(path, count, seed):
    inputs, labels = task.sample_examples(count, seed)
    with open(path, "w", newline="") as handle:
        rows = csv.writer(handle)
        rows.writerow([*task.NUMERIC_COLUMNS, *task.STRING_COLUMNS, "notes", "label"])
        for index, label in enumerate(labels):
            numbers = [repr(float(value)) for value in inputs["numbers"][index]]
            strings = [inputs[column][index] for column in task.STRING_COLUMNS]
            # A column the task leaves out may hold anything, a NaN too.
            rows.writerow([*numbers, *strings, "NaN", int(label)])

def run(*arguments):
    command = [sys.executable, "-m", "PACKAGE", *arguments]
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]

write("train.csv", 256, 0)
write("eval.csv", 64, 1)
run("import-csv", "--train", "train.csv", "--eval", "eval.csv", "--output-dir", "data")
run("train", "--data-dir", "data", "--model-dir", "run", "--epochs", "2",
    "--per-replica-batch-size", "16", "--summary-json", "summary.json")
summary = json.load(open("summary.json"))
assert summary["global_step"] == 32 and np.isfinite(summary["eval_loss"]), summary
learned = json.load(open("run/statistics.json"))
assert sorted(learned["city_vocabulary"]) == sorted(task.CITIES), learned
run("export", "--model-dir", "run")
serve = tf.saved_model.load("run/export/1").signatures["serving_default"]
outputs = serve(
    numbers=tf.constant([[41.0, 52000.0, 4.0], [30.0, 20000.0, 9.0]]),
    city=tf.constant(["Oslo", "Paris"]),
    device=tf.constant(["phone", "desktop"]),
)
probabilities = outputs["probabilities"].numpy()
assert probabilities.shape == (2, task.NUM_CLASSES), probabilities
np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)
print("served", probabilities.tolist())
"""
# A framework case the examples run anyway: they have random layers of their own.
RANDOM_LAYERS_RESUME = (
    "test_resume.py::test_random_layers_killed_mid_epoch_resume_to_the_uninterrupted_weights"
)
# The backbone's steps cost 5-10 times the samples' on CPUs: it runs what its
# depth can break (a comparison with one device, the doctor's, an exact resume,
# export), and its class folders through import-images to train.
EXAMPLE_TESTS = {
    # A label of another shape: what carries it (both loops' equivalence with
    # one device, evaluation, export, its CSV through import-csv to train).
    "multilabel_task.py": (
        "test_fit.py::test_two_replicas_train_like_one_device",
        "test_custom_loop.py::test_two_replicas_train_like_one_device",
        "test_evaluation.py",
        "test_export.py",
        "test_importing.py",
    ),
    "backbone_task.py": (
        "test_importing.py::test_a_model_trains_from_its_image_folders_through_the_commands",
        "test_custom_loop.py::test_two_replicas_train_like_one_device",
        "test_doctor.py::test_doctor_passes_on_the_generated_code",
        RANDOM_LAYERS_RESUME,
        "test_export.py",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("example", slow_cases(EXAMPLES, str))
def test_a_project_trains_a_worked_example_by_its_task_module_alone(cookies, example):
    options = EXAMPLES[example]
    name = example.removesuffix(".py").replace("_", " ")
    result = bake(cookies, project_name=name, **options)
    assert result.exit_code == 0, result.exception
    project = Path(result.project_path)
    package = project / "src" / name.replace(" ", "_")
    source = (project / "examples" / example).read_text()
    (package / "task.py").write_text(source)
    install(project)
    # The installed package runs the swapped module.
    print_source = f"import inspect, {package.name}.task as t; print(inspect.getsource(t))"
    swapped = subprocess.run([sys.executable, "-c", print_source], capture_output=True, text=True)
    assert swapped.stdout == source + "\n", swapped.stderr[-2000:]
    # The framework's own cases (FRAMEWORK_CASES) run in the tabular projects.
    cases = [case for case in FRAMEWORK_CASES if case != RANDOM_LAYERS_RESUME]
    deselected = [f"--deselect=tests/{case}" for case in cases]
    if example in WHOLE_SUITE_EXAMPLES:
        passes_its_own_tests(project, ["-m", "not processes"])
        return
    if example in EXAMPLE_TESTS:
        tests = [f"tests/{case}" for case in EXAMPLE_TESTS[example]]
        passes_its_own_tests(project, [*tests, *deselected])
        return
    if example == "mixed_inputs_task.py":
        script = FROM_CSV_TO_SERVING.replace("PACKAGE", package.name)
        served = subprocess.run(
            [sys.executable, "-c", script], cwd=project, capture_output=True, text=True
        )
        assert served.returncode == 0, served.stdout[-2000:] + served.stderr[-3000:]
    tests = [name for name in TASK_AGNOSTIC_TESTS if (project / "tests" / name).exists()]
    tests += EXTRA_TESTS.get(example, ())
    passes_its_own_tests(
        project, ["-m", "not processes", *(f"tests/{name}" for name in tests), *deselected]
    )


# The fault tier of the multi-worker suite (make test-faults): each fault a
# cluster delivers, two workers restarted by the JobSet's rules.
@pytest.mark.faults
def test_the_multi_worker_project_survives_each_fault_a_cluster_delivers(cookies):
    (options,) = [c for c in COMBINATIONS if combination_id(c) == MULTI_WORKER_SUITE]
    result = bake(cookies, project_name="fault tier", **options)
    assert result.exit_code == 0, result.exception
    project = Path(result.project_path)
    install(project)
    passes_its_own_tests(project, ["-m", "faults", "tests/test_faults.py"])


# The batch script on a real one-node Slurm (make test-slurm; the template's CI
# runs it on its own runner, where apt can install slurm-wlm and munge): a
# multi-worker project submits slurm/train.sbatch unchanged, trains on 2 tasks,
# is preempted mid-epoch, requeued and resumed to the uninterrupted weights. A
# skip (no root, no Slurm) fails here: the tier exists to run.
SLURM_TIER = {
    "task": "tabular",
    "training_loop": "custom",
    "distribution": "multi_worker",
    "keras_package": "keras3",
    "data_source": "synthetic",
    "mixed_precision": "no",
    "launcher": "slurm",
}


@pytest.mark.slurm
def test_the_batch_script_trains_preempts_and_resumes_on_a_real_slurm(cookies):
    result = bake(cookies, project_name="slurm tier", **SLURM_TIER)
    assert result.exit_code == 0, result.exception
    project = Path(result.project_path)
    install(project)
    passes_its_own_tests(project, ["-m", "slurm", "tests/test_slurm_cluster.py"])
