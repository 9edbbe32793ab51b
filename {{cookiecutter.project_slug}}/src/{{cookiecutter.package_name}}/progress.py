"""Long work's progress, as a person at a terminal or a log reads it.

At a terminal: one line redrawn in place, at most 10 times a second and cut to
the terminal's width: what is done of the whole, a bar, the latest figures
(training: the loss), the rate and the time left; log lines print above it
(ProgressAwareHandler). In a log (no terminal: a pod's, a Slurm job's): a line
at most every LOG_SECONDS, and a last one for work that lasted longer, never
one per step. The rate and the time left are the last minute's pace, measured
from the first piece of work done on: the first (training's also traces the
function) does not count.
"""

import collections
import logging
import os
import sys
import threading
import time

log = logging.getLogger(__name__)

# Seconds between two progress lines in a log, and between two redraws at a terminal.
LOG_SECONDS = 60
REDRAW_SECONDS = 0.1
BAR_WIDTH = 24
# The pace is measured over the last PACE_SECONDS, or longer until the window
# holds PACE_UNITS (shards that finish together every few minutes), once
# MIN_PACE_SECONDS have passed.
PACE_SECONDS = 60
PACE_UNITS = 10
MIN_PACE_SECONDS = 1
# The bars being drawn now (the chief's command does one thing at a time), which
# log lines print above; the lock keeps a redraw and a log line from another
# thread (the watchdog's, a SIGTERM's) off each other's row.
ACTIVE = []
LOCK = threading.RLock()


class Progress:
    """Progress of `what` through `total` `unit`s, from `done` (a resumed
    epoch's first step). `per_unit`: what the rate counts and how many a unit
    holds (training: ("examples", the global batch)). `shown`: False on a
    worker that is not the chief (it reports nothing)."""

    def __init__(
        self,
        what,
        total,
        unit,
        done=0,
        per_unit=None,
        shown=True,
        stream=None,
        clock=time.monotonic,
    ):
        self.what, self.total, self.unit, self.shown = what, total, unit, shown
        self.rate_name, self.rate_scale = per_unit or (f"{unit}", 1)
        self.stream = stream or sys.stderr
        self.interactive = shown and is_terminal(self.stream)
        self.clock = clock
        self.started = self.last_shown = clock()
        self.done = done
        self.samples = collections.deque()  # (time, done) over the last PACE_SECONDS
        self.figures = {}
        self.drawn = False
        if self.interactive:
            with LOCK:
                ACTIVE.append(self)

    def update(self, done, **figures):
        """`done` units of the total so far, and the figures to show (loss=...)."""
        now = self.clock()
        if self.samples and self.samples[-1][0] == now:
            self.samples.pop()  # a burst: only its last count at that time
        self.samples.append((now, done))
        while (
            len(self.samples) > 2
            and self.samples[1][0] <= now - PACE_SECONDS
            and done - self.samples[1][1] >= PACE_UNITS
        ):
            self.samples.popleft()
        self.done = done
        self.figures.update(figures)
        if not self.shown:
            return
        if self.interactive and now - self.last_shown >= REDRAW_SECONDS:
            self.draw()
            self.last_shown = now
        elif not self.interactive and now - self.last_shown >= LOG_SECONDS:
            log.info("%s", self.line())
            self.last_shown = now

    def counted(self, items):
        """`items` as they come, each counted done once taken."""
        for done, item in enumerate(items, self.done + 1):
            yield item
            self.update(done)

    def pace(self):
        """Units a second over the last PACE_SECONDS, or None before there is one."""
        (first_time, first_done), (last_time, last_done) = self.samples[0], self.samples[-1]
        if last_time - first_time < MIN_PACE_SECONDS or last_done == first_done:
            return None
        return (last_done - first_done) / (last_time - first_time)

    def close(self):
        """The final figures: the line kept at a terminal, a last line in a log."""
        if self.interactive:
            with LOCK:
                if self in ACTIVE:  # not after abandon_all
                    self.draw()
                    self.write("\n")
                self.leave()
        elif self.shown and self.clock() - self.started >= LOG_SECONDS:
            log.info("%s", self.line())

    def __enter__(self):
        return self

    def __exit__(self, *error):
        if error[0] is None:
            self.close()
        else:
            self.abandon()

    def abandon(self):
        """The work stopped short: the bar's row is cleared for what comes next."""
        if self.interactive:
            with LOCK:
                self.clear()
                self.leave()

    def figures_text(self):
        parts = [f"{self.done:,}/{self.total:,} {self.unit}"]
        parts += [f"{name} {value:.4g}" for name, value in self.figures.items()]
        pace = self.pace() if self.samples else None
        if pace:
            rate = pace * self.rate_scale
            # 3 figures at least: a shard every 40 s is 0.025 shards/s, not 0.
            figure = f"{rate:,.0f}" if rate >= 100 else f"{rate:.3g}"
            parts.append(f"{figure} {self.rate_name}/s")
            if self.done < self.total:
                parts.append(f"{duration((self.total - self.done) / pace)} left")
        return ", ".join(parts)

    def line(self):
        return f"{self.what}: {self.figures_text()}"

    def draw(self):
        filled = BAR_WIDTH * min(self.done, self.total) // max(self.total, 1)
        bar = "[" + "=" * filled + " " * (BAR_WIDTH - filled) + "]"
        text = f"{self.what} {bar} {self.figures_text()}"
        with LOCK:
            if self not in ACTIVE:
                return  # abandoned (abandon_all): the process's last lines are below
            # A line longer than the terminal wraps, and \r goes back to its last row only.
            self.write(f"\r{text[: terminal_width(self.stream) - 1]}\x1b[K")
            self.drawn = True

    def clear(self):
        if self.drawn:
            self.write("\r\x1b[K")

    def write(self, text):
        """To the terminal; one that went away (EIO, EPIPE) stops the bar, not the work."""
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            self.leave()
            self.interactive = False

    def leave(self):
        with LOCK:
            if self in ACTIVE:
                ACTIVE.remove(self)


def is_terminal(stream):
    """A terminal that redraws a line; TERM=dumb (a faked one: `docker run -t`,
    `srun --pty` logs) gets the log's lines."""
    if os.environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no stream (None), or a closed one
        return False


def terminal_width(stream):
    try:
        return os.get_terminal_size(stream.fileno()).columns or 80
    except (AttributeError, ValueError, OSError):
        return 80


def duration(seconds):
    """1h02m, 4m05s, 12s."""
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


def abandon_all():
    """End the line of any bar being drawn and draw it no more, without waiting
    for the lock: for a process that exits at once (the watchdog's stall, a
    SIGTERM with nothing to save), whose last lines go straight to stderr."""
    if ACTIVE:
        ACTIVE.clear()
        try:
            os.write(2, b"\n")
        except OSError:
            pass


class ProgressAwareHandler(logging.StreamHandler):
    """A log line at a terminal prints above the bar being drawn, which then
    comes back below it."""

    def emit(self, record):
        with LOCK:
            for progress in list(ACTIVE):  # one whose terminal went away leaves it
                progress.clear()
            super().emit(record)
            for progress in list(ACTIVE):
                if progress.drawn:
                    progress.draw()
