"""A local multi-worker launcher for development and CI.

`{{ cookiecutter.project_slug }} launch --workers N -- COMMAND [ARGS]` starts N workers of
this project on localhost, each with its own free port and TF_CONFIG, prefixes
every line they print with `[worker I]`, and stops them all as soon as one fails.
A SIGTERM to the launcher goes to every worker, as a cluster's preemption would:
they save the same step and exit with 143, and so does the launcher.
On a cluster, the TFJob operator (Kubernetes) or Slurm starts the workers instead.
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

from {{ cookiecutter.package_name }} import TrainerError
from {{ cookiecutter.package_name }}.arguments import add_subcommand, positive_int

# The commands `launch` runs on every worker.
WORKER_COMMANDS = ("train", "doctor")

# How long a worker gets to exit after SIGTERM before it is killed.
STOP_GRACE_SECONDS = 5
# How long the other workers get to save and exit once one stopped retryably:
# the grace period the cluster files give between SIGTERM and the kill.
GRACE_SECONDS = 120
# A worker's exit status after SIGTERM, once it has saved, or when it lost a
# peer; and after a stall (training/controller.py). Both are retryable, and so is a
# worker killed by a signal: the job resumes from the last checkpoint. A kill
# other than SIGTERM (the OOM killer's SIGKILL, a crash's SIGSEGV) may come
# again on every restart: the launcher then exits 142, which a cluster counts
# against the job's restart limit, never 143, which it does not.
PREEMPTED = 143
STALLED = 142
POLL_SECONDS = 0.2


class LaunchError(TrainerError):
    pass


def add_command(commands, common):
    """`launch`, as a subcommand of the project's command line."""
    launch_command = add_subcommand(
        commands,
        common,
        "launch",
        run_launch,
        "run a command as N local workers (development and CI)",
    )
    launch_command.add_argument("--workers", type=positive_int, required=True)
    launch_command.add_argument(
        "--gpus-per-worker",
        type=positive_int,
        help="give worker I the GPUs I*K .. I*K+K-1 (default: CPU only)",
    )
    launch_command.add_argument(
        "--grace-seconds",
        type=positive_int,
        default=GRACE_SECONDS,
        help="once a worker stopped retryably (preempted, a lost peer, a stall), how long"
        " the others get to save and exit before they are stopped (default: %(default)s)",
    )
    launch_command.add_argument(
        "worker_command",
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND [ARGS]",
        help="what every worker runs: " + " or ".join(WORKER_COMMANDS),
    )
    launch_command.set_defaults(needs_tensorflow=False)


def run_launch(args):
    command = args.worker_command
    if command[:1] == ["--"]:
        command = command[1:]
    if not command or command[0] not in WORKER_COMMANDS:
        given = " ".join(command) or "nothing"
        raise LaunchError(
            f"launch runs {' or '.join(WORKER_COMMANDS)} on every worker, not {given}"
            " - e.g. {{ cookiecutter.project_slug }} launch --workers 2 -- train --epochs 1"
        )
    worker_argv = [sys.executable, "-m", "{{ cookiecutter.package_name }}", *command]
    return launch(args.workers, worker_argv, args.gpus_per_worker, args.grace_seconds)


def free_ports(count):
    """`count` distinct ports that are free on localhost right now."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("localhost", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def worker_tf_configs(ports):
    """One TF_CONFIG (JSON text) per worker of a localhost cluster on `ports`."""
    cluster = {"worker": [f"localhost:{port}" for port in ports]}
    return [
        json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
        for index in range(len(ports))
    ]


def worker_gpus(workers, gpus_per_worker):
    """Each worker's CUDA_VISIBLE_DEVICES: its own GPUs out of those this process may
    use (its CUDA_VISIBLE_DEVICES, if set), or "-1" (CPU only)."""
    if not gpus_per_worker:
        return ["-1"] * workers
    inherited = os.environ.get("CUDA_VISIBLE_DEVICES")
    wanted = workers * gpus_per_worker
    if inherited is None:
        available = [str(gpu) for gpu in range(wanted)]
    else:
        available = [gpu.strip() for gpu in inherited.split(",") if gpu.strip() not in ("", "-1")]
    if len(available) < wanted:
        raise LaunchError(
            f"--workers {workers} --gpus-per-worker {gpus_per_worker} needs {wanted} GPUs,"
            f" but CUDA_VISIBLE_DEVICES={inherited!r} allows {len(available)} - use fewer"
            " workers or GPUs per worker"
        )
    return [
        ",".join(available[index * gpus_per_worker : (index + 1) * gpus_per_worker])
        for index in range(workers)
    ]


def worker_environment(tf_config, devices):
    """The worker's environment: its TF_CONFIG and its own GPUs."""
    return {**os.environ, "TF_CONFIG": tf_config, "CUDA_VISIBLE_DEVICES": devices}


def forward_output(process, prefix, lock):
    for line in process.stdout:
        with lock:
            sys.stdout.write(f"{prefix} {line}")
            sys.stdout.flush()


def stop(processes):
    """SIGTERM every worker still running, then SIGKILL those that do not exit."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_SECONDS
    for process in processes:
        try:
            process.wait(timeout=max(deadline - time.monotonic(), 0))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def describe_exit(code):
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with status {code}"


def is_retryable(code):
    """Whether a worker's exit status is one a restart resumes from: preempted,
    stalled, or killed by a signal."""
    return code in (PREEMPTED, STALLED) or code < 0


def retry_status(codes):
    """The launcher's status once a worker stopped retryably: 142 when one stalled
    or was killed by a signal other than SIGTERM, 143 otherwise."""
    killed = [code for code in codes if code is not None and code < 0 and code != -signal.SIGTERM]
    return STALLED if STALLED in codes or killed else PREEMPTED


def send_sigterm(processes):
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)


def launch(workers, command, gpus_per_worker=None, grace_seconds=GRACE_SECONDS):
    """Run `command` (an argv list) as `workers` local workers; return the exit status:
    0 when every worker succeeds; 1 as soon as one fails (the others are stopped);
    when one stopped retryably (is_retryable), its retry_status, once the others
    have exited or `grace_seconds` have passed (a hung worker is stopped: a
    restart resumes every worker from the last checkpoint)."""
    if workers < 1:
        raise LaunchError(f"--workers {workers}: need at least 1 worker - use --workers 2")
    devices = worker_gpus(workers, gpus_per_worker)
    lock = threading.Lock()
    processes, forwarders = [], []
    previous_handler = signal.signal(signal.SIGTERM, lambda signum, frame: send_sigterm(processes))
    retryable_since = None
    try:
        for index, tf_config in enumerate(worker_tf_configs(free_ports(workers))):
            process = subprocess.Popen(
                command,
                env=worker_environment(tf_config, devices[index]),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                bufsize=1,
            )
            processes.append(process)
            log(lock, f"worker {index}: pid {process.pid}, TF_CONFIG {tf_config}")
            forwarder = threading.Thread(
                target=forward_output, args=(process, f"[worker {index}]", lock), daemon=True
            )
            forwarder.start()
            forwarders.append(forwarder)
        while True:
            codes = [process.poll() for process in processes]
            ended = [code for code in codes if code is not None]
            failed = [
                (index, code)
                for index, code in enumerate(codes)
                if code not in (None, 0) and not is_retryable(code)
            ]
            if failed:
                # Stop first: logging waits for the output lock, which a blocked
                # reader of our output could hold up.
                stop(processes)
                index, code = failed[0]
                log(lock, f"error: worker {index} {describe_exit(code)} - stopped the others")
                return 1
            if all(code == 0 for code in codes):
                return 0
            if any(is_retryable(code) for code in ended) and retryable_since is None:
                retryable_since = time.monotonic()
            status = retry_status(codes)
            if None not in codes:
                log(lock, f"stopped: {describe_ends(codes)}; exiting {status}, retryable")
                return status
            if retryable_since and time.monotonic() - retryable_since > grace_seconds:
                hung = [index for index, code in enumerate(codes) if code is None]
                stop(processes)
                log(
                    lock,
                    f"worker(s) {', '.join(map(str, hung))} did not stop within"
                    f" {grace_seconds} s of {describe_ends(codes)} - stopped them; exiting"
                    f" {status}, retryable",
                )
                return status
            time.sleep(POLL_SECONDS)
    finally:
        signal.signal(signal.SIGTERM, previous_handler)
        stop(processes)
        for forwarder in forwarders:
            forwarder.join(timeout=STOP_GRACE_SECONDS)


def describe_ends(codes):
    """'worker 0 exited with status 143, worker 1 was killed by SIGKILL' for the
    workers that have ended."""
    ended = [(index, code) for index, code in enumerate(codes) if code is not None]
    return ", ".join(f"worker {index} {describe_exit(code)}" for index, code in ended)


def log(lock, message):
    with lock:
        print(f"[launch] {message}", flush=True)
