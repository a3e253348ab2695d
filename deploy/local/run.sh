#!/usr/bin/env bash
# `make run`: Cassandra and Kafka are up and the keyspace migrated (make did that); start the API and
# one poller node in the foreground with development settings. Ctrl-C stops both.
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-.venv/bin}
export TICKD_ADMIN_TOKEN=${TICKD_ADMIN_TOKEN:-dev-admin-token}
export TICKD_CALLBACK_ALLOW_PRIVATE=${TICKD_CALLBACK_ALLOW_PRIVATE:-true}
export TICKD_NODE_ID=${TICKD_NODE_ID:-local-1}
export TICKD_LOG_FORMAT=${TICKD_LOG_FORMAT:-console}

pids=()
start() {  # start <module> <entry point>: only parts that exist in this checkout
  if "$BIN/python" -c "import $1" 2>/dev/null; then
    "$BIN/$2" & pids+=($!)
    echo "make run: started $2 (pid $!)"
  else
    echo "make run: $2 is not built yet; skipping"
  fi
}
start tickd.service.main tickd-api
start tickd.poller.main tickd-poller

echo "make run: Cassandra on 127.0.0.1:9042, Kafka on 127.0.0.1:9092, keyspace ${TICKD_KEYSPACE:-tickd}"
if [ ${#pids[@]} -eq 0 ]; then
  echo "make run: nothing else to start yet; the infrastructure stays up until 'make infra-down'"
  exit 0
fi
echo "make run: API on http://127.0.0.1:${TICKD_API_PORT:-8080} (admin token: $TICKD_ADMIN_TOKEN); Ctrl-C stops"
trap 'kill "${pids[@]}" 2>/dev/null; wait' INT TERM
wait
