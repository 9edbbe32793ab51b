"""No silent hang: a run that stops making progress is stopped, loudly.

A collective waits for every replica with no time limit, so a worker that
stopped or cannot be reached, a stuck GPU collective, or an input pipeline that
stopped producing leaves a job waiting forever while it holds its GPUs
(tensorflow/tensorflow#35878, #57372, #60847). The controller runs each piece
of work that can wait on others (a call of steps, a save, an evaluation, the
workers' preemption check) under the watchdog. One that outlasts its bound
makes the watchdog write every thread's stack to the log (faulthandler), one
line saying where the run was stuck and the likely cause, and exit with 142
(STALLED_EXIT_STATUS, in __init__.py): what the scheduler restarts a bounded number
of times (Slurm requeues, a TFJob or JobSet restarts the pods), and the run
resumes from its last checkpoint.

The bound follows the run: STALL_FACTOR times the slowest piece of that kind so
far, at least `stall_timeout` seconds. The first of each kind traces its
function (and for training fills the input pipeline): it gets FIRST_CALL_FACTOR
times `stall_timeout`, and does not count as the slowest. Work that reports its
progress (`progress()`: a resume's skip through the data, before its first
batch) starts its wait again with each report: a skip through hundreds of GB is
bounded by how long it goes without progress, not by the first call's bound.
"""

import contextlib
import faulthandler
import logging
import os
import sys
import threading
import time

from {{ cookiecutter.package_name }} import last_words, progress

log = logging.getLogger(__name__)

STALL_FACTOR = 10
FIRST_CALL_FACTOR = 3
# How often the watchdog looks: small against any bound worth setting.
CHECK_SECONDS = 1.0


class Watchdog:
    """Watches the blocks run under `watching()` between `start()` and `stop()`.
    `on_stall(message)` is called once, from the watchdog's thread, when a block
    outlasts its bound (default: dump the stacks and exit)."""

    def __init__(self, stall_timeout, exit_status, on_stall=None):
        self.stall_timeout = stall_timeout
        self.exit_status = exit_status
        self.on_stall = on_stall or self.dump_and_exit
        # kind -> the longest block of that kind after its first (0.0: only the first ran)
        self.slowest = {}
        self.current = None  # (kind, what it does, likely cause, started)
        self.current_lock = threading.Lock()  # progress() comes from other threads
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.watch, name="watchdog", daemon=True)

    def start(self):
        self.thread.start()

    def stop(self):
        self.stopped.set()
        self.thread.join()

    @contextlib.contextmanager
    def watching(self, kind, doing, cause):
        """Run the block under watch: `kind` ("training call", "save", ...) sets its
        bound; `doing` and `cause` (what it may wait on) go into the message."""
        started = time.monotonic()
        with self.current_lock:
            self.current = (kind, doing, cause, started)
        try:
            yield
        finally:
            with self.current_lock:
                self.current = None
        seconds = time.monotonic() - started if kind in self.slowest else 0.0
        self.slowest[kind] = max(self.slowest.get(kind, 0.0), seconds)

    def progress(self):
        """The block under watch made progress: its wait starts again (called
        from any thread, e.g. the input pipeline's)."""
        with self.current_lock:
            if self.current is not None:
                kind, doing, cause, _ = self.current
                self.current = (kind, doing, cause, time.monotonic())

    def bound(self, kind):
        if kind not in self.slowest:
            return FIRST_CALL_FACTOR * self.stall_timeout
        return max(self.stall_timeout, STALL_FACTOR * self.slowest[kind])

    def watch(self):
        while not self.stopped.wait(CHECK_SECONDS):
            current = self.current
            if current is None:
                continue
            kind, doing, cause, started = current
            waited, bound = time.monotonic() - started, self.bound(kind)
            if waited > bound:
                self.on_stall(
                    f"no progress for {waited:.0f} s while {doing} (bound {bound:.0f} s:"
                    f" --stall-timeout {self.stall_timeout}, or {STALL_FACTOR}x the slowest"
                    f" {kind} so far) - likely {cause}; exiting {self.exit_status} so the"
                    " job restarts from the last checkpoint"
                )
                return

    def dump_and_exit(self, message):
        # The main thread is blocked inside TensorFlow: only an exit from here ends it.
        progress.abandon_all()
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        log.error("%s", message)
        last_words(self.exit_status, message)
        for handler in logging.getLogger().handlers:
            handler.flush()
        os._exit(self.exit_status)
