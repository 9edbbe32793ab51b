"""make gpu-check: everything to run once on a machine with GPUs, in one go.

  1. install the GPU extra (tensorflow[and-cuda]);
  2. bake the image-task project and run its `gpu-smoke` (float16 and bfloat16
     projects), its `doctor` and its GPU tests (`pytest -m gpu`);
  3. bench the training step: float32, mixed_float16 and mixed_bfloat16, with
     XLA off and on where it applies (the tabular custom loop: the image model's
     synchronized batch normalization cannot run inside a compiled replica step),
     in examples per second per replica (per GPU). On GPUs older than compute
     capability 8.0 the bfloat16 steps fail by design (refused in one line).

Writes build/gpu-check/results.json (every step's command, exit status, seconds
and last output lines, the bench table, the machine) and prints a table.

DRY_RUN=1 (--dry-run) runs every step on 2 logical CPU replicas with small sizes
and skips the install, so the script is tested on CPU machines before a GPU
machine runs it. Under 8 minutes on one GPU.

Run: make gpu-check [DRY_RUN=1]   (or .venv/bin/python benchmarks/gpu_check.py)
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from speed import INSTALL, bake, machine  # noqa: E402

GPU_EXTRA = "tensorflow[and-cuda]==2.21.*"
# (task, mixed_precision option): the projects baked; float32 runs pass --no-mixed-precision.
PROJECTS = (
    ("image", "float16"),
    ("image", "bfloat16"),
    ("tabular", "float16"),
    ("tabular", "bfloat16"),
)
TAIL_LINES = 20


class Steps:
    """Runs commands, keeping each one's status, time and last lines."""

    def __init__(self, environment):
        self.environment = environment
        self.records = []

    def run(self, name, command, cwd=None):
        started = time.perf_counter()
        result = subprocess.run(
            command, cwd=cwd, env=self.environment, capture_output=True, text=True
        )
        output = (result.stdout + result.stderr).strip().splitlines()
        record = {
            "step": name,
            "command": " ".join(str(part) for part in command),
            "returncode": result.returncode,
            "seconds": round(time.perf_counter() - started, 1),
            "tail": output[-TAIL_LINES:],
        }
        self.records.append(record)
        status = "ok" if result.returncode == 0 else f"FAILED ({result.returncode})"
        print(f"[{record['seconds']:6.1f} s] {name}: {status}", flush=True)
        return result

    def skip(self, name, why):
        self.records.append({"step": name, "skipped": why})
        print(f"[   -    ] {name}: skipped ({why})", flush=True)


def bench_runs():
    """(name, project key, extra train flags) of every bench run."""
    runs = []
    for task in ("image", "tabular"):
        loop = "custom" if task == "tabular" else "fit"
        for precision in ("float32", "float16", "bfloat16"):
            project = (task, "float16" if precision == "float32" else precision)
            flags = ["--loop", loop]
            if precision == "float32":
                flags.append("--no-mixed-precision")
            for xla in (False, True) if task == "tabular" else (False,):
                name = f"{task} {precision} xla-{'on' if xla else 'off'}"
                runs.append((name, project, [*flags, *(["--jit-compile"] if xla else [])]))
    return runs


def main(argv=None):
    parser = argparse.ArgumentParser(description="the one-shot GPU machine check")
    parser.add_argument("--dry-run", action="store_true", help="2 logical CPUs, small sizes")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "gpu-check")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    if args.dry_run:
        environment["CUDA_VISIBLE_DEVICES"] = "-1"
    cpu_flags = ["--cpu-replicas", "2"] if args.dry_run else []
    steps = Steps(environment)
    python = sys.executable

    if args.dry_run:
        steps.skip("install the GPU extra", "dry run")
    else:
        steps.run("install the GPU extra", [python, "-m", "pip", "install", "-q", GPU_EXTRA])

    packages = {}
    for task, precision in PROJECTS:
        name = f"gpu {task} {precision}"
        project = bake(
            workdir,
            project_name=name,
            task=task,
            training_loop="both",
            data_source="tfrecord",
            mixed_precision=precision,
        )
        steps.run(f"bake and install {name}", [*INSTALL, str(project)])
        packages[task, precision] = (name.replace(" ", "_"), project)

    # float16 runs on GPUs from compute capability 7.0; bfloat16 needs 8.0.
    image, image_dir = packages["image", "float16"]
    data_dir = workdir / "image-data"
    examples = "1024" if args.dry_run else "16384"
    steps.run(
        "make-data",
        [python, "-m", image, "make-data", "--output-dir", str(data_dir), "--examples", examples],
    )
    for precision in ("float16", "bfloat16"):
        package, _ = packages["image", precision]
        steps.run(f"gpu-smoke ({precision})", [python, "-m", package, "gpu-smoke", *cpu_flags])
    steps.run(
        "doctor",
        [
            python,
            "-m",
            image,
            "doctor",
            *cpu_flags,
            "--data-dir",
            str(data_dir),
            "--per-replica-batch-size",
            "16" if args.dry_run else "64",
        ],
    )
    steps.run(
        "GPU tests (pytest -m gpu)",
        [python, "-m", "pytest", "-q", "-m", "gpu", "-rs", "-p", "no:cacheprovider"],
        cwd=image_dir,
    )

    tabular_data = workdir / "tabular-data"
    tabular, _ = packages["tabular", "bfloat16"]
    steps.run(
        "make-data (tabular)",
        [
            python,
            "-m",
            tabular,
            "make-data",
            "--output-dir",
            str(tabular_data),
            "--examples",
            "8192" if args.dry_run else "65536",
        ],
    )
    if args.dry_run:
        call_flags = ["--steps-per-epoch", "8", "--steps-per-call", "4"]
    else:  # the default --steps-per-call (100): 3 calls, the first (tracing) not timed
        call_flags = ["--steps-per-epoch", "300"]
    table = []
    for name, key, flags in bench_runs():
        package, _ = packages[key]
        data = data_dir if key[0] == "image" else tabular_data
        summary_path = workdir / f"{name.replace(' ', '-')}.json"
        result = steps.run(
            f"bench {name}",
            [
                python,
                "-m",
                package,
                "train",
                *cpu_flags,
                "--epochs",
                "1",
                *call_flags,
                "--data-dir",
                str(data),
                "--model-dir",
                str(workdir / "runs" / name.replace(" ", "-")),
                "--summary-json",
                str(summary_path),
                *flags,
            ],
        )
        if result.returncode == 0:
            summary = json.loads(summary_path.read_text())
            per_replica = summary["examples_per_second"] / summary["replicas"]
            table.append(
                {
                    "run": name,
                    "replicas": summary["replicas"],
                    "examples_per_second_per_replica": per_replica,
                }
            )
        else:
            table.append({"run": name, "error": (result.stderr.strip().splitlines() or ["?"])[-1]})

    failed = [record["step"] for record in steps.records if record.get("returncode")]
    results = {
        "dry_run": args.dry_run,
        "machine": machine(),
        "steps": steps.records,
        "bench": table,
        "failed": failed,
    }
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print("\n| run | replicas | examples/s per replica |\n|---|---:|---:|")
    for row in table:
        value = (
            f"{row['examples_per_second_per_replica']:,.0f}" if "error" not in row else row["error"]
        )
        print(f"| {row['run']} | {row.get('replicas', '-')} | {value} |")
    print(f"wrote {args.out / 'results.json'}")
    if failed:
        print("failed: " + ", ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
