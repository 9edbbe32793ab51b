"""Speed of the generated training code, against TensorFlow's own tutorials.

Bakes a project per task (tabular, image; both loops, TFRecord data), then runs
benchmarks/measure.py on each in a fresh process on 2 logical CPU replicas:

  fit_vs_tutorial          the fit engine vs "Distributed training with Keras"
  custom_vs_tutorial       the custom engine vs "Custom training with tf.distribute"
                           (one step per tf.function call)
  fit_vs_bare_fit          the fit engine vs a bare model.fit on the same model
  custom_vs_overhead_free  the custom engine at the default --steps-per-call vs
                           256 steps per call, at most the whole epoch (the
                           per-call cost's bound)
  startup_20x_data         seconds to the first step on 20x the data over 1x
  input_vs_step            the input pipeline alone over the training step alone
  resume_90_vs_10_percent  the first batch of a resume 90% into a pass over
                           one 10% in, read from disk (resume_cost.py)

and the training recipe's per-step costs (recipe_ratios): examples/s with
gradient clipping, the weights' moving average, or 2 accumulated micro-batches
on, over the plain engine's, beside a second plain engine (the noise band);
plus a checkpoint save's cost in training steps, the replica sync check's
(training/replica_sync.py) share of a checkpoint interval, and the time to bake one
project and every combination of the code options. Ratios above 1 mean the
generated code is faster (or, for the startup and resume figures, slower).

Writes build/bench/results.json (with the machine and versions) and
build/bench/ratios.png, and prints a table.

Run: make bench            (QUICK=1: small sizes, one repeat; CI runs it)
     .venv/bin/python benchmarks/speed.py [--quick] [--tasks tabular,image] [--out DIR]
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "hooks"))
import rules  # noqa: E402

TASKS = ("tabular", "image")
# Installs a baked project in place; requirements-dev.txt has its dependencies.
INSTALL = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "-e"]
# Targets on 2 logical CPU replicas (issue 13): ratio -> {task: least acceptable value}.
TARGETS = {
    "fit_vs_tutorial": {"tabular": 1.0, "image": 1.0},
    "custom_vs_tutorial": {"tabular": 1.5},
    "fit_vs_bare_fit": {"tabular": 1.0, "image": 1.0},
    "custom_vs_overhead_free": {"tabular": 0.95, "image": 0.95},
}
# Baked in quick mode to time the option product (every code combination otherwise).
QUICK_PRODUCT_SAMPLE = 8


def bake(output_dir, **options):
    from cookiecutter.main import cookiecutter

    return Path(
        cookiecutter(str(ROOT), no_input=True, output_dir=str(output_dir), extra_context=options)
    )


def bake_seconds(workdir, quick):
    """Seconds to bake one project, and every code combination (scaled from a
    sample in quick mode)."""
    combinations = [options for options in rules.code_combinations() if rules.is_supported(options)]
    chosen = combinations[:: len(combinations) // QUICK_PRODUCT_SAMPLE] if quick else combinations
    start = time.perf_counter()
    for index, options in enumerate(chosen):
        bake(workdir / "product", project_name=f"product {index}", **options)
    seconds = time.perf_counter() - start
    return {
        "one": seconds / len(chosen),
        "product": seconds * len(combinations) / len(chosen),
        "combinations": len(combinations),
        "baked": len(chosen),
    }


def bake_and_install(workdir, task):
    name = f"bench {task}"
    project = bake(
        workdir, project_name=name, task=task, training_loop="both", data_source="tfrecord"
    )
    subprocess.run([*INSTALL, str(project)], check=True)
    return name.replace(" ", "_")


def machine():
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = {name: metadata.version(name) for name in ("tensorflow", "keras", "cookiecutter")}
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": versions,
    }


def measure_recipe(workdir, quick):
    """benchmarks/recipe.py on the tabular bake: the held-out accuracy at 1x, 4x
    and 16x the reference batch, for Adam and SGD, with and without the recipe."""
    return measure("bench_tabular", workdir, quick, script="recipe.py")


def measure(package, workdir, quick, script="measure.py"):
    command = [sys.executable, str(ROOT / "benchmarks" / script), package, str(workdir)]
    environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": "-1"}
    result = subprocess.run(
        [*command, *(["--quick"] if quick else [])],
        check=True,
        capture_output=True,
        text=True,
        env=environment,
    )
    return json.loads(result.stdout.splitlines()[-1])


def table(results):
    """The ratios as a Markdown table (the README's), targets beside them."""
    tasks = list(results["tasks"])
    names = list(results["tasks"][tasks[0]]["ratios"])
    lines = ["| ratio | " + " | ".join(tasks) + " | target |", "|---|" + "---:|" * (len(tasks) + 1)]
    for name in names:
        values = " | ".join(f"{results['tasks'][task]['ratios'][name]:.2f}" for task in tasks)
        target = "-"
        if name in TARGETS:
            by_task = TARGETS[name]
            target = f">= {max(by_task.values())}"
            if len(by_task) < len(TASKS):
                target += " (" + ", ".join(by_task) + ")"
        lines.append(f"| `{name}` | {values} | {target} |")
    return "\n".join(lines)


def held_out_table(recipe):
    """benchmarks/recipe.py's runs: global batch, peak rate, held-out accuracy."""
    lines = [
        f"recipe (tabular, seeds {recipe['seeds']}; "
        + ", ".join(
            f"{name} data: {data['epochs']} epoch(s) of {data['training_examples']} examples"
            for name, data in recipe["data"].items()
        )
        + ")",
        "| run | global batch | peak rate | held-out accuracy | spread | eval loss |",
        "|---|---|---|---|---|---|",
    ]
    for name, accuracy in recipe["mean_eval_accuracy"].items():
        batch, rate = recipe["global_batch"][name], recipe["peak_learning_rate"][name]
        lines.append(
            f"| `{name}` | {batch} | {rate:.4g} | {accuracy:.4f}"
            f" | {recipe['accuracy_spread'][name]:.4f} | {recipe['mean_eval_loss'][name]:.4f} |"
        )
    return "\n".join(lines)


def recipe_table(results):
    """The training recipe's per-step costs: examples/s with each feature on
    over the plain engine's (1.00: free; `off_repeat`: the noise band)."""
    tasks = list(results["tasks"])
    names = list(results["tasks"][tasks[0]]["recipe_ratios"])
    lines = ["| feature on / plain | " + " | ".join(tasks) + " |", "|---|" + "---:|" * len(tasks)]
    for name in names:
        values = " | ".join(
            f"{results['tasks'][task]['recipe_ratios'][name]:.2f}" for task in tasks
        )
        lines.append(f"| `{name}` | {values} |")
    return "\n".join(lines)


def chart(results, path):
    import matplotlib

    matplotlib.use("Agg")  # no display
    import matplotlib.pyplot as plt

    tasks = list(results["tasks"])
    names = [name for name in results["tasks"][tasks[0]]["ratios"] if name in TARGETS]
    figure, axes = plt.subplots(figsize=(8, 4))
    width = 0.8 / len(tasks)
    for offset, task in enumerate(tasks):
        values = [results["tasks"][task]["ratios"][name] for name in names]
        positions = [index + offset * width for index in range(len(names))]
        axes.bar(positions, values, width, label=task)
    for index, name in enumerate(names):
        for offset, task in enumerate(tasks):
            if task in TARGETS[name]:
                left = index + (offset - 0.5) * width
                axes.hlines(
                    TARGETS[name][task], left, left + width, colors="black", linestyles="dashed"
                )
    axes.set_xticks([index + width * (len(tasks) - 1) / 2 for index in range(len(names))], names)
    axes.axhline(1.0, color="grey", linewidth=0.5)
    axes.set_ylabel("speed ratio (dashed: target)")
    mode = "quick" if results["quick"] else "full"
    axes.set_title(f"generated code vs references, 2 logical CPU replicas ({mode})")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def task_list(text):
    """--tasks: a comma-separated subset of TASKS, in TASKS's order."""
    tasks = text.split(",")
    unknown = [task for task in tasks if task not in TASKS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"{unknown[0]!r} is not a task - use a comma-separated subset of {','.join(TASKS)}"
        )
    return [task for task in TASKS if task in tasks]


def main(argv=None):
    parser = argparse.ArgumentParser(description="speed of the generated training code")
    parser.add_argument("--quick", action="store_true", help="small sizes, one repeat (CI)")
    parser.add_argument(
        "--tasks",
        type=task_list,
        default=",".join(TASKS),
        help="the tasks to measure, comma-separated (default: %(default)s); the recipe"
        " study runs with the tabular one",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "bench")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="bench-"))
    started = time.perf_counter()
    results = {"quick": args.quick, "machine": machine(), "targets": TARGETS, "tasks": {}}
    results["bake_seconds"] = bake_seconds(workdir, args.quick)
    for task in args.tasks:
        package = bake_and_install(workdir, task)
        results["tasks"][task] = measure(package, workdir, args.quick)
    if "tabular" in args.tasks:
        results["recipe"] = measure_recipe(workdir, args.quick)
    results["bench_seconds"] = time.perf_counter() - started
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    chart(results, args.out / "ratios.png")
    print(table(results))
    bakes = results["bake_seconds"]
    print(
        f"bake: {bakes['one']:.2f} s per project, {bakes['product']:.0f} s for all"
        f" {bakes['combinations']} code combinations"
    )
    for task in args.tasks:
        measured = results["tasks"][task]
        checkpoint, startup = measured["checkpoint"], measured["startup_seconds"]
        print(
            f"{task}: checkpoint save {checkpoint['save_in_steps']:.1f} training steps,"
            f" {100 * checkpoint['share_of_run']:.2f}% of a run at --checkpoint-every"
            f" {checkpoint['checkpoint_every']}; first step {startup['1x']:.2f} s after"
            f" start ({measured['startup_examples_1x']} examples), {startup['20x']:.2f} s on 20x;"
            f" a resume 90% into {measured['resume_skip']['gb']:.2f} GB"
            f" {measured['resume_skip']['seconds_to_first_batch']['90%']:.1f} s to its first"
            f" batch, 10% in {measured['resume_skip']['seconds_to_first_batch']['10%']:.1f} s;"
            f" the replica sync check {1000 * checkpoint['sync_check_seconds']:.1f} ms,"
            f" {100 * checkpoint['sync_check_share_of_interval']:.3f}% of a checkpoint"
            f" interval (goal: under 1%), {1000 * checkpoint['sync_repair_seconds']:.1f} ms"
            " when it repairs the largest variable"
        )
    print(recipe_table(results))
    if "recipe" in results:
        print(held_out_table(results["recipe"]))
    print(f"wrote {args.out / 'results.json'} and {args.out / 'ratios.png'}")


if __name__ == "__main__":
    main()
