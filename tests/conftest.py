"""Shared fixtures. Integration fixtures find Cassandra and Kafka through the TICKD_* settings and fail
loudly (never skip) when they do not answer: `make test` starts them; so does `make infra-up`."""

from __future__ import annotations

import os

# Tests get their own keyspace unless the caller chose one (make test sets it).
os.environ.setdefault("TICKD_KEYSPACE", "tickd_test")
