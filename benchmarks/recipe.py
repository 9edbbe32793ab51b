"""Does the training recipe hold as the global batch grows? (issues 22 and 34)

On the tabular sample task (TFRecord shards the project writes), trains the same
epochs on 2 logical CPU replicas at global batches of 1, 4 and 16 times the
reference batch (256), for Adam, LAMB and SGD, on the defaults:

  OPT_Nx                the default recipe at N times the reference batch: the
                        rate scaled by the optimizer's rule (the square root
                        for Adam and LAMB, linear for SGD), a warmup, a cosine
                        decay
  OPT_16x_linear        16x on the linear rule (16x the rate), the rule
                        Adam's defaults used before issue 34
  OPT_16x_warmup_25     16x with a quarter of the run's 64 steps warming up
                        (the default is 5%: 3 steps)
  lamb_16x_double_rate  LAMB at 16x from twice the reference rate (0.02)
  adam_16x_4x_epochs    Adam at 16x for 4 times the epochs: 256 steps, a
                        quarter of 1x's (the flag given last is the one taken)
  OPT_16x_without_recipe  16x on the reference rate, constant, no warmup:
                        what a run scaled out without the recipe gets
  small_OPT             a newcomer's small data set on the defaults: 142
                        training examples, a global batch of 32, 5 epochs

Each is trained from several seeds; the figures are the mean held-out accuracy
and loss (eval_metric and eval_loss in the run's summary), and their spread over
the seeds. The quick mode (the test suite's) runs QUICK_RUNS on less data.

Run by speed.py (make bench) on an installed tabular bake:
    python benchmarks/recipe.py PACKAGE WORKDIR [--quick]
"""

import json
import statistics
import subprocess
import sys
from pathlib import Path

import script

REPLICAS = 2
REFERENCE_BATCH = 256
WITHOUT_RECIPE = ["--learning-rate-scaling", "none", "--warmup-steps", "0",
                  "--lr-schedule", "constant"]
# The sample model adds an L2 loss (1e-4), as it does for Adam and SGD: it stands
# in for LAMB's own decay (both would decay twice, which make_optimizer refuses).
OWN_FLAGS = {"adam": [], "sgd": [], "lamb": ["--weight-decay", "0"]}
# name -> (optimizer, global batch, data set, extra flags)
RUNS = {
    **{
        f"{optimizer}_{scale}x": (optimizer, scale * REFERENCE_BATCH, "large", OWN_FLAGS[optimizer])
        for optimizer in ("adam", "lamb", "sgd")
        for scale in (1, 4, 16)
    },
    **{
        f"{optimizer}_16x_linear": (optimizer, 16 * REFERENCE_BATCH, "large",
                                    [*OWN_FLAGS[optimizer], "--learning-rate-scaling", "linear"])
        for optimizer in ("adam", "lamb")
    },
    "adam_16x_4x_epochs": ("adam", 16 * REFERENCE_BATCH, "large", ["--epochs", "64"]),
    "lamb_16x_double_rate": ("lamb", 16 * REFERENCE_BATCH, "large",
                             [*OWN_FLAGS["lamb"], "--learning-rate", "0.02"]),
    **{
        f"{optimizer}_16x_warmup_25": (optimizer, 16 * REFERENCE_BATCH, "large",
                                       [*OWN_FLAGS[optimizer], "--warmup-steps", "16"])
        for optimizer in ("adam", "lamb")
    },
    "adam_16x_without_recipe": ("adam", 16 * REFERENCE_BATCH, "large", WITHOUT_RECIPE),
    "sgd_16x_without_recipe": ("sgd", 16 * REFERENCE_BATCH, "large", WITHOUT_RECIPE),
    "small_adam": ("adam", 32, "small", []),
    "small_sgd": ("sgd", 32, "small", []),
}
QUICK_RUNS = ("adam_1x", "adam_16x", "adam_16x_linear", "lamb_16x", "small_adam")
# data set -> (training examples, epochs) by mode. The large set: 16 epochs of
# 16384 examples are 1024 steps at 1x and 64 at 16x.
DATA = {
    False: {"large": (16384, 16), "small": (142, 5)},
    True: {"large": (4096 * 2, 1), "small": (142, 5)},
}
SEEDS = {False: (1, 2, 3), True: (1,)}
# The recipe holds when 4x is within this of 1x (held-out accuracy).
TOLERANCE = 0.01


def run(package, data_dir, model_dir, optimizer, global_batch, flags, epochs, seed):
    summary = Path(f"{model_dir}.json")
    # fmt: off
    command = [
        sys.executable, "-m", package, "train",
        "--cpu-replicas", str(REPLICAS),
        "--optimizer", optimizer,
        "--per-replica-batch-size", str(global_batch // REPLICAS),
        "--epochs", str(epochs), "--seed", str(seed),
        "--data-dir", str(data_dir), "--model-dir", str(model_dir),
        "--summary-json", str(summary),
        *flags,
    ]
    # fmt: on
    subprocess.run(command, check=True, capture_output=True)
    return json.loads(summary.read_text())


def make_data(package, data_dir, examples):
    subprocess.run(
        [sys.executable, "-m", package, "make-data", "--output-dir", str(data_dir),
         "--examples", str(examples), "--num-files", "2"],
        check=True,
        capture_output=True,
    )


def measure(package, workdir, quick):
    names = QUICK_RUNS if quick else tuple(RUNS)
    data_dirs = {}
    for data, (examples, _) in DATA[quick].items():
        data_dirs[data] = workdir / f"recipe-data-{data}"
        make_data(package, data_dirs[data], examples)
    accuracy, loss, learning_rate = {}, {}, {}
    for seed in SEEDS[quick]:
        for name in names:
            optimizer, global_batch, data, flags = RUNS[name]
            epochs = DATA[quick][data][1]
            summary = run(package, data_dirs[data], workdir / f"recipe-{name}-{seed}",
                          optimizer, global_batch, flags, epochs, seed)
            accuracy.setdefault(name, []).append(summary["eval_metric"])
            loss.setdefault(name, []).append(summary["eval_loss"])
            learning_rate[name] = summary["peak_learning_rate"]
    mean = {name: statistics.mean(values) for name, values in accuracy.items()}
    results = {
        "task": "tabular",
        "data": {data: {"training_examples": examples, "epochs": epochs}
                 for data, (examples, epochs) in DATA[quick].items()},
        "seeds": list(SEEDS[quick]),
        "global_batch": {name: RUNS[name][1] for name in names},
        "peak_learning_rate": learning_rate,
        "eval_accuracy": accuracy,
        "eval_loss": loss,
        "mean_eval_accuracy": mean,
        "mean_eval_loss": {name: statistics.mean(values) for name, values in loss.items()},
        "accuracy_spread": {name: max(values) - min(values) for name, values in accuracy.items()},
        "tolerance": TOLERANCE,
    }
    if not quick:
        results["recipe_holds_at_4x"] = {
            optimizer: abs(mean[f"{optimizer}_4x"] - mean[f"{optimizer}_1x"]) <= TOLERANCE
            for optimizer in ("adam", "lamb", "sgd")
        }
    return results


if __name__ == "__main__":
    script.run(measure, __doc__)
