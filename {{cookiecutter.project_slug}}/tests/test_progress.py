"""Long work shows its progress: at a terminal a bar redrawn in place with the
figures, the rate and the time left; in a log a line a minute at most, never
one per step; nothing from a worker that is not the chief."""

import io
import logging
import os
import pty
import re
import select
import subprocess
import sys
import time

import pytest

from {{ cookiecutter.package_name }} import progress
from {{ cookiecutter.package_name }}.progress import Progress, ProgressAwareHandler
from {{ cookiecutter.package_name }}.training.controller import SkipProgress


class Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.fixture(autouse=True)
def no_bar_left(monkeypatch):
    """Terminals 200 columns wide unless a test says; a test that fails mid-bar
    leaves no bar for the next."""
    monkeypatch.setattr(progress, "terminal_width", lambda stream: getattr(stream, "columns", 200))
    monkeypatch.setenv("TERM", "xterm")  # whatever the machine running the tests says
    yield
    progress.ACTIVE.clear()


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def steady_epoch(bar, clock, steps, seconds_a_step, loss=0.5):
    for step in range(1, steps + 1):
        clock.now += seconds_a_step
        bar.update(step, loss=loss)


def test_a_terminal_shows_a_bar_with_the_loss_the_rate_and_the_time_left():
    terminal, clock = Terminal(), Clock()
    examples = ("examples", 64)
    bar = Progress("epoch 1/2", 300, "steps", per_unit=examples, stream=terminal, clock=clock)
    steady_epoch(bar, clock, 150, 0.05)  # 20 steps a second
    last = terminal.getvalue().split("\r")[-1]
    assert last.startswith("epoch 1/2 [============            ] 150/300 steps, loss 0.5")
    # 20 steps of 64 examples a second, and 150 steps (7.5 s) left at that pace.
    assert re.search(r"1,280 examples/s, [78]s left", last), last
    # Redrawn at most 10 times a second, not at each of the 150 steps.
    assert terminal.getvalue().count("\r") <= 76
    bar.close()
    assert terminal.getvalue().endswith("\n") and progress.ACTIVE == []


def test_term_dumb_gets_the_logs_lines_not_a_bar(monkeypatch, caplog):
    monkeypatch.setenv("TERM", "dumb")
    terminal, clock = Terminal(), Clock()
    caplog.set_level(logging.INFO, logger=progress.__name__)
    with Progress("epoch 1/1", 5000, "steps", stream=terminal, clock=clock) as bar:
        steady_epoch(bar, clock, 5000, 0.05)
    assert terminal.getvalue() == "" and len(caplog.records) == 5


class Watchdog:
    def __init__(self):
        self.reports = 0

    def progress(self):
        self.reports += 1


@pytest.mark.parametrize("chief", [True, False])
def test_a_resumes_skip_shows_its_records_and_ends_with_the_first_call(monkeypatch, chief):
    terminal, watchdog = Terminal(), Watchdog()
    monkeypatch.setattr(sys, "stderr", terminal)
    skip = SkipProgress(watchdog, shown=chief)
    for skipped in range(0, 100_000, 4096):  # as the input pipeline reports
        skip.report(skipped, 100_000)
    assert progress.ACTIVE == ([skip.bar] if chief else [])
    skip.end()
    skip.end()  # every later call: nothing more
    skip.report(100_000, 100_000)  # from the pipeline's thread, late: no bar again
    assert watchdog.reports == 26  # each report is progress, on every worker
    last = terminal.getvalue().split("\r")[-1]
    shown = f"resume: skipping [{'=' * 24}] 100,000/100,000 records"
    assert last.startswith(shown) if chief else not last
    assert progress.ACTIVE == [] and terminal.getvalue().endswith("\n" if chief else "")


def test_a_log_gets_a_line_a_minute_at_most_and_one_at_the_end(caplog):
    clock = Clock()
    caplog.set_level(logging.INFO, logger=progress.__name__)
    with Progress("epoch 1/1", 5000, "steps", stream=io.StringIO(), clock=clock) as bar:
        steady_epoch(bar, clock, 5000, 0.05, loss=0.25)  # 250 seconds
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 5, lines  # at 60, 120, 180 and 240 s, and the end
    first = r"epoch 1/1: 1,20\d/5,000 steps, loss 0.25, 20 steps/s, 3m10s left"
    assert re.fullmatch(first, lines[0]), lines[0]
    assert lines[-1] == "epoch 1/1: 5,000/5,000 steps, loss 0.25, 20 steps/s"


def test_a_label_a_burst_a_slow_rate_and_a_narrow_terminal_show_as_they_are():
    terminal, clock = Terminal(), Clock()
    label = "index: reading the train files"
    with Progress(label, 64, "files", stream=terminal, clock=clock) as bar:
        # 8 processes finish 8 shards together every 300 s.
        for burst in range(1, 4):
            clock.now = 300.0 * burst
            for done in range(8 * burst - 7, 8 * burst + 1):
                bar.update(done)
        clock.now += 0.2
        bar.update(24)
        last = terminal.getvalue().split("\r")[-1]
    assert last.startswith("index: reading the train files [=========               ] 24/64 files")
    # 8 files every 300 s, not the burst's instant: 0.0267 a second, 25 minutes left.
    assert "0.0267 files/s, 25m00s left" in last, last
    narrow = Terminal()
    narrow.columns = 80
    with Progress("epoch 1/1", 10, "steps", stream=narrow, clock=clock) as bar:
        clock.now += 1
        bar.update(5, loss=0.123456789, accuracy=0.5, gradient_norm=1.5, learning_rate=0.1)
    assert max(len(line) for line in narrow.getvalue().split("\r")) <= 80 + len("\x1b[K")


def test_a_bar_ended_by_an_error_is_cleared_and_draws_no_more():
    terminal, clock = Terminal(), Clock()
    with pytest.raises(KeyboardInterrupt):
        with Progress("epoch 1/1", 10, "steps", stream=terminal, clock=clock) as bar:
            clock.now = 1.0
            bar.update(5)
            raise KeyboardInterrupt
    assert terminal.getvalue().endswith("\r\x1b[K") and progress.ACTIVE == []


def test_bars_abandoned_for_a_processs_last_lines_draw_no_more():
    terminal, clock = Terminal(), Clock()
    bar = Progress("epoch 1/1", 100, "steps", stream=terminal, clock=clock)
    clock.now = 1.0
    bar.update(5)
    drawn = terminal.getvalue()
    progress.abandon_all()  # the watchdog's stall exit: the stacks follow on stderr
    clock.now = 2.0
    bar.update(6)  # from another thread (a resume's skip), before the exit
    bar.close()
    assert terminal.getvalue() == drawn and progress.ACTIVE == []


class Dying(Terminal):
    gone = False

    def write(self, text):
        if self.gone:
            raise OSError(5, "Input/output error")
        return super().write(text)


def test_a_log_line_clears_every_bar_though_one_terminal_went_away():
    dying, live, clock = Dying(), Terminal(), Clock()
    first = Progress("a", 10, "x", stream=dying, clock=clock)
    second = Progress("c", 10, "x", stream=live, clock=clock)
    clock.now = 1.0
    first.update(3)
    second.update(3)
    dying.gone = True
    ProgressAwareHandler(io.StringIO()).emit(logging.makeLogRecord({"msg": "a line"}))
    assert live.getvalue().count("\r\x1b[K") == 1  # cleared above the line, then redrawn
    assert progress.ACTIVE == [second]


def test_the_first_piece_of_work_does_not_set_the_pace():
    # A resumed epoch's first call traces the function: 30 s for 10 steps.
    terminal, clock = Terminal(), Clock()
    bar = Progress("epoch 2/2", 1000, "steps", done=500, stream=terminal, clock=clock)
    clock.now = 30.0
    bar.update(510)
    assert "left" not in terminal.getvalue()
    clock.now = 31.0
    bar.update(610)  # 100 steps a second from here
    assert terminal.getvalue().split("\r")[-1].endswith("100 steps/s, 4s left\x1b[K")
    bar.close()


def test_a_worker_that_is_not_the_chief_shows_nothing(caplog):
    terminal, clock = Terminal(), Clock()
    caplog.set_level(logging.INFO, logger=progress.__name__)
    with Progress("epoch 1/1", 5000, "steps", shown=False, stream=terminal, clock=clock) as bar:
        steady_epoch(bar, clock, 5000, 0.05)
    assert terminal.getvalue() == "" and caplog.records == []


def test_a_log_line_prints_above_the_bar_which_comes_back_below_it():
    terminal, clock = Terminal(), Clock()
    handler = ProgressAwareHandler(terminal)
    logger = logging.getLogger("a checkpoint")
    logger.addHandler(handler)
    try:
        with Progress("epoch 1/1", 10, "steps", stream=terminal, clock=clock) as bar:
            clock.now = 1.0
            bar.update(5)
            logger.warning("checkpoint: epoch 0 step 5")
    finally:
        logger.removeHandler(handler)
    after_the_bar = terminal.getvalue().split("5/10 steps\x1b[K", 1)[1]
    assert after_the_bar.startswith("\r\x1b[Kcheckpoint: epoch 0 step 5\n\repoch 1/1 [")


def test_train_at_a_terminal_draws_its_bar(tmp_path{% if cookiecutter.data_source == "tfrecord" %}, data_dir{% endif %}):
    # The command as a person runs it: its stderr a terminal (a pseudo-terminal).
    command = [
        sys.executable, "-m", "{{ cookiecutter.package_name }}", "train", "--epochs", "1",
        "--steps-per-epoch", "6", "--checkpoint-every", "3", "--model-dir", str(tmp_path / "run"),
{%- if cookiecutter.data_source == "tfrecord" %}
        "--data-dir", str(data_dir),
{%- endif %}
    ]  # fmt: skip
    controller, terminal = pty.openpty()
    environment = {**os.environ, "CUDA_VISIBLE_DEVICES": "-1", "TERM": "xterm"}
    run = subprocess.Popen(command, stdout=terminal, stderr=terminal, env=environment)
    os.close(terminal)
    shown, deadline = b"", time.monotonic() + 300
    while time.monotonic() < deadline:
        if not select.select([controller], [], [], 1)[0]:
            continue
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the terminal closed: the command ended
            break
        if not chunk:
            break
        shown += chunk
    os.close(controller)
    if run.poll() is None:
        run.kill()
    assert run.wait(timeout=60) == 0, shown.decode(errors="replace")[-3000:]
    text = shown.decode(errors="replace")
    assert re.search(r"\repoch 1/1 \[=+\] 6/6 steps, loss [\d.]+", text), text[-3000:]
    # The checkpoint's log line prints above the bar, on a line of its own.
    assert re.search(r"\r\x1b\[Kcheckpoint: epoch 0 step 3", text), text[-3000:]
