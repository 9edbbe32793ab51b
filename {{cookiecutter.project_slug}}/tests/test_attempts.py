"""The restart budget: attempts that made no progress stop the run, attempts
that did never do (training/attempts.py)."""

import json

import pytest

from {{ cookiecutter.package_name }} import LAST_WORDS
from {{ cookiecutter.package_name }}.training.attempts import ATTEMPTS_FILE, Attempts


@pytest.fixture(autouse=True)
def no_last_words():
    """Attempts.start registers its end with the process's last words: not here."""
    yield
    LAST_WORDS.clear()


def attempt(model_dir, from_step, status=None, cause="", limit=3):
    """Start an attempt from `from_step`; end it as given (None: killed, no end).
    Returns the line it stopped with, or None."""
    attempts = Attempts(str(model_dir), limit)
    stop = attempts.start(from_step)
    if stop is None and status is not None:
        attempts.end(status, cause)
    return stop


def recorded(model_dir):
    return json.loads((model_dir / ATTEMPTS_FILE).read_text())["attempts"]


def test_attempts_that_start_from_the_same_checkpoint_stop_the_run_naming_each_cause(tmp_path):
    assert attempt(tmp_path, 0, 142, "no progress for 601 s while saving a checkpoint") is None
    assert attempt(tmp_path, 0) is None  # killed: no end recorded
    assert attempt(tmp_path, 0, 143, "the worker ... stopped answering") is None  # a lost peer
    stop = attempt(tmp_path, 0)
    assert stop == (
        "the last 3 attempts of this run made no progress, each started from global step 0"
        " (attempt 1: exit 142 (no progress for 601 s while saving a checkpoint); attempt 2:"
        " no end recorded: killed (out of memory, SIGKILL after the grace period) or lost;"
        " attempt 3: exit 143 (the worker ... stopped answering)) - find and fix the cause"
        " (a node, the storage, memory), then run the same command again;"
        " --no-progress-attempts sets how many are allowed"
    )
    assert [a.get("status") for a in recorded(tmp_path)] == [142, None, 143, 1]
    # A person reran it: the count starts again.
    assert attempt(tmp_path, 0) is None


def test_an_attempt_that_moved_the_checkpoint_on_is_free(tmp_path):
    # A spot node preempted or killed every few hours: each attempt saved further.
    for step in range(0, 100, 10):
        assert attempt(tmp_path, step) is None
    for _ in range(3):
        assert attempt(tmp_path, 100) is None
    assert attempt(tmp_path, 100) is not None  # the 3 before it from step 100 too


def test_a_preemption_that_saved_is_progress_and_one_with_nothing_to_save_counts(tmp_path):
    for step in (40, 44, 48):  # saved after SIGTERM: each attempt starts further on
        assert attempt(tmp_path, step, 143, "preempted: saved after SIGTERM") is None
    # A SIGTERM before the first step is what the launcher sends the chief when
    # another worker's node died: it counts like any end.
    assert attempt(tmp_path, 52, 143, "SIGTERM with nothing to save") is None
    assert attempt(tmp_path, 52, 143, "SIGTERM with nothing to save") is None
    assert attempt(tmp_path, 52, 143, "SIGTERM with nothing to save") is None
    assert "the last 3 attempts" in attempt(tmp_path, 52)


@pytest.mark.parametrize("status", [0, 1, 2])
def test_an_end_a_person_follows_up_starts_the_count_again(tmp_path, status):
    attempt(tmp_path, 8, 142, "stalled")
    attempt(tmp_path, 8, 142, "stalled")
    attempt(tmp_path, 8, status, "an end no launcher restarts")
    assert attempt(tmp_path, 8) is None
    assert attempt(tmp_path, 8) is None


def test_a_damaged_record_starts_the_count_again(tmp_path, caplog):
    (tmp_path / ATTEMPTS_FILE).write_text('{"attempts": [{"from_step": ')
    assert attempt(tmp_path, 0, limit=1) is None
    assert f"{tmp_path / ATTEMPTS_FILE} cannot be read" in caplog.text
    assert [a["number"] for a in recorded(tmp_path)] == [1]
    assert "the last 1 attempts" in attempt(tmp_path, 0, limit=1)
