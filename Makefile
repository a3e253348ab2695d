# tickd — the two commands a newcomer needs are `make run` and `make test`; everything else is a step of those.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

include Makefile.infra

.PHONY: install lock lint test test-unit run dev migrate bench-api bench-fire bench-pipeline bench-isolation bench-ring clean simulate test-cluster chromium wrk

install: $(STAMP)

# Reinstall only when the dependencies change. Every package comes from the lock file, pinned and hash-checked;
# tickd and the SDK are then installed editable with --no-deps, so nothing unpinned comes along, and
# `pip check` fails the install if the lock no longer satisfies pyproject.toml (run `make lock`).
$(STAMP): pyproject.toml sdk/python/pyproject.toml requirements/lock.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 $(BIN)/pip install -q --require-hashes -r requirements/lock.txt
	$(BIN)/pip install -q --no-deps -e . -e sdk/python
	$(BIN)/pip check
	touch $(STAMP)

# Refresh the lock files from pyproject.toml and sdk/python/pyproject.toml, for Python 3.11 on Linux x86_64:
# requirements/lock.txt (runtime + test extras + the SDK: what make install installs) and requirements/runtime.txt
# (runtime only, the same versions: what the image installs). Pins that still fit are kept; UPGRADE=1 moves
# every package to the newest version pyproject allows. Installs nothing but uv (pinned) in $(VENV).
UV_VERSION := 0.13.9
LOCK_FLAGS = --quiet --python-version 3.11 --python-platform x86_64-unknown-linux-gnu --generate-hashes \
	--custom-compile-command 'make lock' $(if $(UPGRADE),--upgrade)
lock:
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q 'uv==$(UV_VERSION)'
	$(BIN)/uv pip compile $(LOCK_FLAGS) --extra test -o requirements/lock.txt pyproject.toml sdk/python/pyproject.toml
	$(BIN)/uv pip compile $(LOCK_FLAGS) -c requirements/lock.txt -o requirements/runtime.txt pyproject.toml

lint: install
	$(BIN)/ruff check schema service poller tests bench sdk
	$(BIN)/ruff format --check schema service poller tests bench sdk
	@# Tests that cannot fail or bet on the machine's speed: no assertion, a sleep then an assert, a duration bound.
	$(BIN)/python -m tests.checks
	@# mypy finds modules by folder, and tickd.* is mapped onto the top folders (package-dir): give it a tree of links.
	mkdir -p .cache/typecheck/tickd && for p in schema service poller; do ln -sfn ../../../$$p .cache/typecheck/tickd/$$p; done
	MYPYPATH=.cache/typecheck $(BIN)/mypy
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

# The multi-host tier alone (tests/cluster, root): a 3-node Cassandra, pollers and a subscriber on their own
# network namespaces; starts the cluster if it is not running and stops it after. `make test` runs it too
# (last, when run as root).
test-cluster: install
	TICKD_CLUSTER_TESTS=1 TICKD_KEYSPACE=$${TICKD_KEYSPACE:-tickd_test} $(BIN)/pytest tests/cluster -m cluster

# The API's create rates next to the raw driver rate of the same rows (100k single + 200k batch; < 5 min).
# Single creates twice: from Python workers, and from wrk (C, Debian's package, installed here when missing),
# whose lighter client leaves the API and Cassandra the cores.
bench-api: install infra-up wrk
	$(BIN)/python -m bench.api --schedules 100000 --batch-schedules 200000 --raw-schedules 100000 --phase-cap-s 50 \
	  --phases raw,single,wrk,batch $(ARGS)

wrk:
	command -v wrk >/dev/null || { $$([ "$$(id -u)" = 0 ] || echo sudo) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$([ "$$(id -u)" = 0 ] || echo sudo) apt-get install -y -qq wrk; }

migrate: install infra-up
	$(BIN)/tickd-migrate

# Everything in one process over the in-memory store: no Cassandra, no Kafka, no Java (state is lost on stop).
dev: install
	$(BIN)/tickd-dev $(ARGS)

run: install infra-up migrate
	PYTHON=$(PYTHON) BIN=$(BIN) bash deploy/local/run.sh

clean: infra-down
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

# A node's own CPU per fire, with no servers: one node on virtual time, the in-memory store, stand-in
# broker; PROFILE=1 adds where it went, by module (seconds; a tool for the fire path, not a rate).
bench-pipeline: install
	$(BIN)/python -m bench.pipeline $(if $(PROFILE),--profile) $(ARGS)

# Ramps the offered Kafka and HTTP fire rates until p99 lateness crosses 1 s, then 100,000 Kafka fires due in
# one minute on a fresh node (peak RSS), and the raw aiokafka ceiling (bounded; stops itself; ARGS=--help).
bench-fire: install infra-up
	$(BIN)/python -m bench.fire $(ARGS)

# The largest request of every API endpoint from one client, while another client GETs one schedule every
# 20 ms: A's latency, B's p50/p99/max, the API's CPU per request; flags A over 2 s and B over 100 ms, asserts
# nothing (bounded: one API process on its own keyspace, < 5 min; ARGS=--help).
bench-isolation: install infra-up
	$(BIN)/python -m bench.isolation $(ARGS)

# Placement, plain and with bounded loads, over many random memberships (no servers; ~3 min on 2 busy cores).
bench-ring: install
	$(BIN)/python -m bench.ring $(ARGS)
