"""Long work's progress, as a person at a terminal or a log reads it.

At a terminal: one line redrawn in place, at most 10 times a second: what is
done of the whole, a bar, the latest figures (training: the loss), the rate and
the time left; log lines print above it (ProgressAwareHandler). In a log (no
terminal: a pod's, a Slurm job's): a line at most every LOG_SECONDS, and one at
the end, never one per step. The rate and the time left follow the last
minute's pace, not the whole run's: a resume's first call, which also traces
the function, does not count.
"""

import logging
import sys
import time

log = logging.getLogger(__name__)

# Seconds between two progress lines in a log, and between two redraws at a terminal.
LOG_SECONDS = 60
REDRAW_SECONDS = 0.1
BAR_WIDTH = 24
# The pace is the last this many seconds' (an exponential average).
PACE_SECONDS = 60
# The bar being drawn now (at most one: the chief's command does one thing at a
# time), which log lines print above.
ACTIVE = []


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
        self.interactive = shown and self.stream.isatty()
        self.clock = clock
        self.started = self.last_time = self.last_shown = clock()
        self.done = self.last_done = done
        self.pace = None  # units a second
        self.figures = {}
        self.drawn = False
        if self.interactive:
            ACTIVE.append(self)

    def update(self, done, **figures):
        """`done` units of the total so far, and the figures to show (loss=...)."""
        now = self.clock()
        if now > self.last_time and done > self.last_done:
            # The first piece of work paid for the start (training: tracing): no pace yet.
            if self.last_time > self.started:
                seconds = now - self.last_time
                recent = (done - self.last_done) / seconds
                if self.pace is None:
                    self.pace = recent
                else:
                    self.pace += min(1.0, seconds / PACE_SECONDS) * (recent - self.pace)
            self.last_time, self.last_done = now, done
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

    def close(self):
        """The final figures: the line kept at a terminal, a last line in a log."""
        if self.interactive:
            self.draw()
            self.stream.write("\n")
            self.stream.flush()
            ACTIVE.remove(self)
        elif self.shown and self.clock() - self.started >= LOG_SECONDS:
            log.info("%s", self.line())

    def __enter__(self):
        return self

    def __exit__(self, *error):
        if error[0] is None:
            self.close()
        elif self in ACTIVE:
            self.clear()
            ACTIVE.remove(self)

    def line(self):
        parts = [f"{self.what}: {self.done:,}/{self.total:,} {self.unit}"]
        parts += [f"{name} {value:.4g}" for name, value in self.figures.items()]
        if self.pace:
            parts.append(f"{self.pace * self.rate_scale:,.0f} {self.rate_name}/s")
            if self.done < self.total:
                parts.append(f"{duration((self.total - self.done) / self.pace)} left")
        return ", ".join(parts)

    def draw(self):
        filled = BAR_WIDTH * min(self.done, self.total) // max(self.total, 1)
        bar = "[" + "=" * filled + " " * (BAR_WIDTH - filled) + "]"
        what, rest = self.line().split(": ", 1)
        self.stream.write(f"\r{what} {bar} {rest}\x1b[K")
        self.stream.flush()
        self.drawn = True

    def clear(self):
        if self.drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


def duration(seconds):
    """1h02m, 4m05s, 12s."""
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


class ProgressAwareHandler(logging.StreamHandler):
    """A log line at a terminal prints above the bar being drawn, which then
    comes back below it."""

    def emit(self, record):
        for progress in ACTIVE:
            progress.clear()
        super().emit(record)
        for progress in ACTIVE:
            if progress.drawn:
                progress.draw()
