# Two commands on a fresh clone (Python 3.11+ and the package registries):
#   make demo   bake the default project, train it on 2 simulated replicas, run its doctor
#   make test   the template's test suite (the fast tier, and the slow tier's IN_MAKE_TEST)

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Test processes: the baked suites spend much of their time waiting on the
# training processes they start, so 2 workers keep 2 cores busy. One test at a
# time to each, in the order listed (the heaviest suites first).
WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -n $(WORKERS) --dist load --maxschedchunk 1
DEMO_DIR := build/demo
DEMO := $(DEMO_DIR)/tf-distributed-trainer

.PHONY: demo test test-fast test-slow test-slurm test-faults lint bench gpu-check clean

$(BIN)/python:
	$(PYTHON) -c 'import sys; sys.exit("error: Python 3.11+ is needed, found " + sys.version.split()[0] + " - set PYTHON=python3.11") if sys.version_info < (3, 11) else None'
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: requirements-dev.txt | $(BIN)/python
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -r requirements-dev.txt
	touch $@

demo: $(VENV)/.installed
	rm -rf $(DEMO_DIR)
	$(BIN)/cookiecutter --no-input --output-dir $(DEMO_DIR) .
	$(BIN)/python -m pip install --no-deps --no-build-isolation -e $(DEMO)
	cd $(DEMO) && ../../../$(BIN)/tf-distributed-trainer train --cpu-replicas 2 --epochs 3 \
		--model-dir runs/demo --summary-json runs/demo/summary.json
	$(BIN)/python -c "import json, sys; s = json.load(open(sys.argv[1])); \
		print('replicas:', s['replicas'], ' global batch:', s['global_batch_size'], \
		' losses per epoch:', ', '.join('%.4f' % x for x in s['losses']), \
		' replica copies apart by:', s['replica_spread'], '(repairs: %d)' % s['replica_repairs'])" \
		$(DEMO)/runs/demo/summary.json
	cd $(DEMO) && ../../../$(BIN)/tf-distributed-trainer doctor --cpu-replicas 2

test: $(VENV)/.installed
	$(PYTEST) -m "not slurm and not faults and not extended"

test-fast: $(VENV)/.installed
	$(PYTEST) -m "not slow and not slurm and not faults"

# SLOW_SHARD=K/N: only the K-th of N shares of the slow tier (parallel CI jobs).
test-slow: $(VENV)/.installed
	$(PYTEST) -m slow $(if $(SLOW_SHARD),--slow-shard $(SLOW_SHARD))

# The batch script on a real one-node Slurm: as root, with apt-get or Slurm installed.
test-slurm: $(VENV)/.installed
	$(BIN)/python -m pytest -m slurm tests/test_baked_projects.py

# The fault tier of a multi-worker project: each fault a cluster delivers, two
# workers restarted by the JobSet's rules (make test runs a few of its cases).
test-faults: $(VENV)/.installed
	$(BIN)/python -m pytest -m faults tests/test_baked_projects.py

lint: $(VENV)/.installed
	$(BIN)/ruff check hooks tests benchmarks local_extensions.py

clean:
	rm -rf build $(VENV)

# QUICK=1: small sizes and one repeat, to prove the bench runs (CI).
bench: $(VENV)/.installed
	$(BIN)/python benchmarks/speed.py $(if $(QUICK),--quick)

# On a GPU machine, once: install the GPU extra, gpu-smoke, doctor, the GPU tests
# and the precision/XLA bench. DRY_RUN=1: the same on 2 logical CPUs (no GPU).
gpu-check: $(VENV)/.installed
	$(BIN)/python benchmarks/gpu_check.py $(if $(DRY_RUN),--dry-run)
