"""The run's attempts, and a restart budget counted in progress, not restarts.

A launcher that counts restarts cannot tell a bad node that fails every attempt
from a multi-day run on spot nodes that is preempted often but moves on each
time: only the trainer knows. The chief keeps MODEL_DIR/attempts.json: each
attempt, the global step it started from, and how it ended where it could say
(a kill, an out-of-memory or a lost node leave no end). An attempt made
progress when the next one starts from a later checkpoint: a preemption that
saved always does. An attempt that ended 0, 1 or 2 (a person then started the
next) starts the count again. When the last `limit` attempts all started where
this one starts, the run stops with one line naming each one's cause, and exit
status 1, which no launcher restarts: the launchers restart every other status,
their own limits only an outer bound (docs/clusters.md's restart table). A SIGTERM
with nothing to save counts like any other end: when a worker dies, the
launcher stops the others with one, so it is often what the chief sees of a
node that dies on every attempt.
"""

import datetime
import json
import logging
import os
import socket
import threading

import tensorflow as tf

from {{ cookiecutter.package_name }} import LAST_WORDS, TrainerError, write_atomically
from {{ cookiecutter.package_name }}.config import MAX_NO_PROGRESS_ATTEMPTS

log = logging.getLogger(__name__)

ATTEMPTS_FILE = "attempts.json"
# The newest attempts kept in the file (a run restarted for weeks stays small):
# --no-progress-attempts may not be more (config.MAX_NO_PROGRESS_ATTEMPTS).
KEEP_ATTEMPTS = MAX_NO_PROGRESS_ATTEMPTS
# How long the end of an attempt waits for the file to be written: it is the
# last thing a process does, and storage that hangs must not keep it alive.
END_WRITE_SECONDS = 5.0
# The end of an attempt that a person, not a launcher, follows up (130: Ctrl-C).
FINAL_STATUSES = (0, 1, 2, 130)


class NoProgress(TrainerError):
    """The run made no progress in its last attempts: a person must look."""

    exit_status = 1


class Attempts:
    """The record in `model_dir` (a local path or a URL), written by the chief."""

    def __init__(self, model_dir, limit):
        self.path = os.path.join(model_dir, ATTEMPTS_FILE)
        self.limit = limit
        self.attempts = []
        self.current = None
        self.write_lock = threading.Lock()  # the command's end and a thread's may overlap

    def start(self, from_step):
        """Record an attempt from global step `from_step`; return the line to stop
        with when the last `limit` counted attempts made no progress, else None."""
        self.attempts = read_attempts(self.path)
        stuck = self.stuck_at(from_step)
        self.current = {
            "number": self.attempts[-1]["number"] + 1 if self.attempts else 1,
            "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "host": socket.gethostname(),
            "from_step": from_step,
        }
        self.attempts = [*self.attempts, self.current][-KEEP_ATTEMPTS:]
        if len(stuck) < self.limit:
            self.write()
            LAST_WORDS.append(self.end)
            return None
        self.current.update(status=NoProgress.exit_status, cause="stopped: no progress")
        self.write()
        causes = "; ".join(f"attempt {a['number']}: {describe_end(a)}" for a in stuck)
        return (
            f"the last {len(stuck)} attempts of this run made no progress, each started from"
            f" global step {from_step} ({causes}) - find and fix the cause (a node, the storage,"
            " memory), then run the same command again; --no-progress-attempts sets how many"
            " are allowed"
        )

    def stuck_at(self, from_step):
        """The attempts since the last one a person followed up that started from
        `from_step` like this one, newest last; empty when the one before this
        started elsewhere."""
        stuck = []
        for attempt in reversed(self.attempts):
            if attempt.get("status") in FINAL_STATUSES or attempt["from_step"] != from_step:
                break
            stuck.insert(0, attempt)
        return stuck

    def end(self, status, cause):
        """How this attempt ended: recorded before the process exits, within
        END_WRITE_SECONDS (it may be called from any thread)."""
        self.current.update(status=status, cause=cause)
        writer = threading.Thread(target=self.write, name="attempts", daemon=True)
        writer.start()
        writer.join(END_WRITE_SECONDS)

    def write(self):
        with self.write_lock:
            text = json.dumps({"attempts": self.attempts}, indent=1) + "\n"
            try:
                write_atomically(self.path, text)
            except (OSError, tf.errors.OpError) as err:
                log.warning("could not record the attempt in %s (%s)", self.path, err)


def read_attempts(path):
    """The attempts recorded at `path`, oldest first ([] for none, or a damaged
    file: the budget then counts from here)."""
    try:
        if not tf.io.gfile.exists(path):
            return []
        with tf.io.gfile.GFile(path) as handle:
            attempts = json.load(handle)["attempts"]
        if all(
            isinstance(a.get("from_step"), int) and isinstance(a.get("number"), int)
            for a in attempts
        ):
            return attempts
    except (json.JSONDecodeError, AttributeError, KeyError, TypeError, UnicodeDecodeError):
        pass
    except tf.errors.OpError as err:  # storage that does not answer: never a reason to stop
        log.warning("%s cannot be read (%s): the count of attempts starts again", path, err)
        return []
    log.warning("%s cannot be read: the count of attempts without progress starts again", path)
    return []


def describe_end(attempt):
    if "status" not in attempt:
        return "no end recorded: killed (out of memory, SIGKILL after the grace period) or lost"
    return f"exit {attempt['status']} ({attempt.get('cause', 'no cause recorded')})"
