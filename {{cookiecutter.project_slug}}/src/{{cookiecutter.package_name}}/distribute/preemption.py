"""SIGTERM, from the first moment of the process.

Kubernetes and Slurm send SIGTERM before they kill. In a container whose
command `exec`s the trainer with no init in front (the image's tini aside), the
trainer is PID 1, and the kernel drops a signal to a PID 1 that has no handler
for it: a handler installed only once training starts leaves start-up, the
checks and the restore deaf to the notice, and the pod is SIGKILLed at the end
of its grace period. So every command that loads TensorFlow installs one first
(cli.main), before TensorFlow is imported.

What a SIGTERM does depends on whether the process holds steps that a save
would keep:
- none (start-up, the restore, a resume's skip through the data, the run's tail
  after its last checkpoint): the process exits 143 at once. A thread of its own
  does it, as the main thread may be inside TensorFlow for minutes (a resume's
  skip through hundreds of GB), where Python's own handler would wait for it;
- some (from the first trained call to the last checkpoint): the controller
  saves at the next step boundary, every worker at the same one, and exits 143
  (controller.PreemptionWatch).
"""

import logging
import os
import signal
import threading

from {{ cookiecutter.package_name }} import last_words, progress

log = logging.getLogger(__name__)

# 128 + SIGTERM: what the JobSet, the TFJob and the sbatch script restart on
# (docs/clusters.md's restart table).
PREEMPTED_EXIT_STATUS = 143
SAVING_FIRST = "SIGTERM: saving a checkpoint at the next step boundary, then stopping"


class Notice:
    """What this process knows of SIGTERM: whether one came, and whether it holds
    steps a save would keep (the controller says so)."""

    def __init__(self):
        self.received = False
        self.unsaved_steps = False
        self.caught_from_start = False  # catch_from_start ran: this process is the trainer
        self.stderr = None  # a copy of the process's standard error, taken then


notice = Notice()


def catch_from_start():
    """Handle SIGTERM from now on, for the whole process (from the main thread,
    before any other thread starts)."""
    if notice.caught_from_start or threading.current_thread() is not threading.main_thread():
        return
    # A handler, or the kernel never delivers SIGTERM to a PID 1. Blocked in every
    # thread (TensorFlow's, started later, inherit the mask), so that no handler
    # runs: making a MultiWorkerMirroredStrategy installs one of TensorFlow's own
    # that only notes the signal (the process would train on through a preemption
    # notice). The thread below takes it from the pending ones at once, even while
    # the main thread is inside TensorFlow, where Python's handler would wait.
    # TensorFlow's start-up runs with standard error captured (distribute/startup.py): the
    # last line goes to the real one.
    notice.stderr = os.dup(2)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    signal.signal(signal.SIGTERM, noted)
    threading.Thread(target=take_sigterms, name="sigterm", daemon=True).start()
    notice.caught_from_start = True


def noted(signum, frame):
    """The handler that makes SIGTERM deliverable. Blocked, it does not run; should
    a thread started before catch_from_start take the signal, it acts, later."""
    on_sigterm()


def take_sigterms():
    while True:
        signal.sigwait({signal.SIGTERM})
        on_sigterm()


def default_sigterm():
    """In a process this one starts (it inherits the blocked mask): SIGTERM ends
    it, as by default."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


def on_sigterm():
    notice.received = True
    if notice.unsaved_steps:
        log.warning(SAVING_FIRST)
        return
    exit_with_nothing_to_save()


def exit_with_nothing_to_save():
    """Exit 143 at once. The line is written straight to standard error: a log
    handler's lock, held by a thread stuck on a file system, must not hold the
    exit up (the attempt's record waits a bounded time: training/attempts.py)."""
    line = (
        "SIGTERM before this process trained a step, or after its last checkpoint:"
        f" nothing to save, exiting {PREEMPTED_EXIT_STATUS}"
    )
    progress.abandon_all()
    os.write(notice.stderr, (line + "\n").encode())
    last_words(PREEMPTED_EXIT_STATUS, "SIGTERM with nothing to save")
    os._exit(PREEMPTED_EXIT_STATUS)
