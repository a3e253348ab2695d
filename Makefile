# tickd — the two commands a newcomer needs are `make run` and `make test`; everything else is a step of those.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

include Makefile.infra

.PHONY: install lint test test-unit run dev migrate bench-api bench-fire clean simulate test-cluster chromium

install: $(STAMP)

# Reinstall only when the dependencies change.
$(STAMP): pyproject.toml sdk/python/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 $(BIN)/pip install -q -e '.[test]'
	$(BIN)/pip install -q -e sdk/python
	touch $(STAMP)

lint: install
	$(BIN)/ruff check schema service poller tests bench sdk
	$(BIN)/ruff format --check schema service poller tests bench sdk
	$(BIN)/mypy
	cd sdk/python && ../../$(BIN)/mypy

# Unit tests only: no Cassandra, no Kafka.
test-unit: install
	$(BIN)/pytest tests/unit

# The deterministic simulation of the whole cluster with faults, on many seeds (make test runs 200).
# SEEDS=N seeds from FIRST (default 0); replay one with `PYTHONHASHSEED=0 $(BIN)/python -m tests.simulation --seed N -v`.
SEEDS ?= 2000
FIRST ?= 0
simulate: install
	PYTHONHASHSEED=0 $(BIN)/python -m tests.simulation --seeds $(SEEDS) --first $(FIRST) --jobs $$(nproc)

# The browser tier (tests/browser) drives Debian's chromium, installed here with apt-get only when it is
# missing; Playwright never downloads a browser of its own.
chromium:
	test -x /usr/bin/chromium || { $$([ "$$(id -u)" = 0 ] || echo sudo) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$([ "$$(id -u)" = 0 ] || echo sudo) apt-get install -y -qq chromium; }

# Everything: lint, then infra up, a fresh test keyspace, the whole suite; stops what it started.
test: install lint chromium
	PYTHON=$(PYTHON) BIN=$(BIN) bash tests/run.sh

# The 3-node cluster scenarios (tests/cluster, root, ~6 min): starts the cluster if it is not running and
# stops it after; not part of `make test`.
test-cluster: install
	TICKD_CLUSTER_TESTS=1 TICKD_KEYSPACE=$${TICKD_KEYSPACE:-tickd_test} $(BIN)/pytest tests/cluster -m cluster

# The API's create rates next to the raw driver rate of the same rows (100k single + 200k batch; < 5 min).
bench-api: install infra-up
	$(BIN)/python -m bench.api --schedules 100000 --batch-schedules 200000 --raw-schedules 100000 --phase-cap-s 50

migrate: install infra-up
	$(BIN)/tickd-migrate

# Everything in one process over the in-memory store: no Cassandra, no Kafka, no Java (state is lost on stop).
dev: install
	$(BIN)/tickd-dev $(ARGS)

run: install infra-up migrate
	PYTHON=$(PYTHON) BIN=$(BIN) bash deploy/local/run.sh

clean: infra-down
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

# 100,000 fires due in one minute across a client's pollers, to Kafka and to HTTP (bounded; stops itself).
bench-fire: install infra-up
	$(BIN)/python -m bench.fire
