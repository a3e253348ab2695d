#!/usr/bin/env bash
# Runs the whole suite against the real Cassandra and Kafka. Starts them if they are not running and
# then stops them again, even when tests fail; servers that were already up are left as they were.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
BIN=${BIN:-.venv/bin}
INFRA="$PYTHON deploy/local/infra.py"

started=0
if ! $INFRA status >/dev/null 2>&1; then
  started=1
fi
cleanup() {
  if [ "$started" = 1 ]; then
    $INFRA down
  fi
}
trap cleanup EXIT

$INFRA up || exit 1

# Seeds of the simulation replay exactly under the same hash seed.
export PYTHONHASHSEED=${PYTHONHASHSEED:-0}
export TICKD_KEYSPACE=${TICKD_KEYSPACE:-tickd_test}
export TICKD_CALLBACK_ALLOW_PRIVATE=${TICKD_CALLBACK_ALLOW_PRIVATE:-true}
"$BIN/tickd-migrate" --drop && "$BIN/tickd-migrate" || exit 1

# The slowest tests are listed at the end, to see where the suite's time goes (CI: 45 minutes on 2 cores).
"$BIN/pytest" --durations=30 "$@"
status=$?

# The multi-host tier (tests/cluster): network namespaces, a three-node Cassandra and pollers on their own
# hosts. It needs root (CI runs as root); the single node is stopped first to give it the cores.
if [ "$(id -u)" = 0 ]; then
  if [ "$started" = 1 ]; then
    $INFRA down && started=0
  fi
  TICKD_CLUSTER_TESTS=1 "$BIN/pytest" --durations=10 tests/cluster -m cluster || status=1
else
  echo "tests/cluster NOT RUN: it makes network namespaces and needs root (run make test-cluster as root)" >&2
fi
exit $status
