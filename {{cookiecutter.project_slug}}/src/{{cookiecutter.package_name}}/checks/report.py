"""The report of a series of checks (the doctor's, gpu-smoke's): one line each,
`PASS <check>: <detail>`, `WARN <check>: <finding> - <fix>` (a pass that costs
speed) or `FAIL <check>: <reason> - <fix>`.

A check is a function that returns `(detail, value)` or raises CheckFailed or
CheckWarning; a crash inside the checked code is a failed check too, with the
fix its command gives for that check.
"""

import dataclasses

from {{ cookiecutter.package_name }} import TrainerError, first_line


@dataclasses.dataclass
class CheckResult:
    name: str
    passed: bool
    detail: str
    # Passed, but something costs speed (not correctness): WARN.
    warning: bool = False

    def __str__(self):
        status = "FAIL" if not self.passed else "WARN" if self.warning else "PASS"
        return f"{status} {self.name}: {self.detail}"


class CheckFailed(Exception):
    """A failed check; the message reads `<reason> - <fix>`."""


class CheckWarning(Exception):
    """A check that passed with a warning; the message reads `<finding> - <fix>`."""


class Report:
    """The results of a series of checks, in the order they ran.

    `crash_fixes` maps a check's name (its first word) to what to do when the
    checked code crashes in it.
    """

    def __init__(self, crash_fixes):
        self.crash_fixes = crash_fixes
        self.results = []

    @property
    def passed(self):
        return bool(self.results) and all(result.passed for result in self.results)

    def run(self, name, check, *args):
        """Run `check(*args) -> (detail, value)`; return the value, or None if it failed."""
        outcome = self.attempt(name, check, *args)
        if outcome is None:
            return None
        detail, value = outcome
        self.add(name, True, detail)
        return value

    def attempt(self, name, function, *args):
        """Return `function(*args)`; on an error, record a failed `name` and return None."""
        try:
            return function(*args)
        except CheckWarning as err:
            self.add(name, True, str(err), warning=True)
        except (CheckFailed, TrainerError) as err:  # messages that already say what to do
            self.add(name, False, str(err))
        except Exception as err:  # a crash in the checked code is a failed check
            fix = self.crash_fixes[name.split()[0]]
            self.add(name, False, f"{type(err).__name__}: {first_line(err)} - {fix}")
        return None

    def not_run(self, name, reason):
        self.add(name, False, f"not run: {reason}")

    def add(self, name, passed, detail, warning=False):
        self.results.append(CheckResult(name, passed, " ".join(detail.split()), warning))

    def print(self):
        for result in self.results:
            print(result, flush=True)
