#!/usr/bin/env bash
# Runs the whole suite against the real Cassandra and Kafka. Starts them if they are not running and
# then stops them again, even when tests fail; servers that were already up are left as they were.
#
# With arguments, they go to one pytest run as they are (`tests/run.sh tests/unit -x`). Without, the suite
# runs in three phases, so that its wall time (CI: 45 minutes on 2 cores) goes on tests, not on waiting:
#   1. every tier but acceptance and cluster, one process (CPU-bound: the simulation, the unit tiers);
#   2. at once: the acceptance scenarios in two streams (each scenario has its own keyspace and processes,
#      and mostly waits for its fires to come due) and, as root, the multi-host tier (its own three-node
#      Cassandra on network namespaces);
#   3. the acceptance scenarios marked `exclusive` (they kill the single Cassandra or Kafka), one at a time.
# Each stream of phase 2 writes to its own log under .cache/test-logs, printed when it ends.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
BIN=${BIN:-.venv/bin}
INFRA="$PYTHON deploy/local/infra.py"
LOGS=.cache/test-logs

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

if [ $# -gt 0 ]; then
  "$BIN/pytest" --durations=30 "$@"
  exit $?
fi

status=0
began=$SECONDS
phase() { echo; echo "=== tests/run.sh: $1 (at $((SECONDS - began)) s)"; }

# A stream of phase 2: pytest with its output in a log, printed whole when it ends.
stream() {
  local name=$1
  shift
  "$BIN/pytest" --durations=15 -p no:cacheprovider "$@" >"$LOGS/$name.log" 2>&1
  local rc=$?
  phase "$name ended (exit $rc)"
  cat "$LOGS/$name.log"
  return $rc
}

# The slowest tests are listed at the end of each run, to see where the suite's time goes.
phase "1: every tier but acceptance and cluster"
"$BIN/pytest" --durations=30 --ignore=tests/acceptance --ignore=tests/cluster || status=1

phase "2: acceptance in two streams, and the multi-host tier"
rm -rf "$LOGS" && mkdir -p "$LOGS"
cluster=""
if [ "$(id -u)" = 0 ]; then
  TICKD_CLUSTER_TESTS=1 stream cluster tests/cluster -m cluster &
  cluster=$!
else
  echo "tests/cluster NOT RUN: it makes network namespaces and needs root (run make test-cluster as root)" >&2
fi
# The two streams split the scenarios by file, roughly evenly by their time; a new file goes to the second.
first=(test_timing.py test_recurring.py test_throttle.py test_operations.py test_secure.py)
stream acceptance-1 "${first[@]/#/tests/acceptance/}" -m "acceptance and not exclusive" &
one=$!
stream acceptance-2 tests/acceptance "${first[@]/#/--ignore=tests/acceptance/}" -m "acceptance and not exclusive" &
two=$!
wait $one || status=1
wait $two || status=1

phase "3: the acceptance scenarios that take a server away, one at a time"
"$BIN/pytest" --durations=5 -p no:cacheprovider tests/acceptance -m "acceptance and exclusive" || status=1

if [ -n "$cluster" ]; then
  wait "$cluster" || status=1
fi
phase "done: exit $status"
exit $status
