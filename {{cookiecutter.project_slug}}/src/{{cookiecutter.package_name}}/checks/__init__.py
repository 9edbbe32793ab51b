"""The checks a user runs or the commands run first: the task's pieces, the
doctor, the GPU smoke test, and their PASS / WARN / FAIL report."""
