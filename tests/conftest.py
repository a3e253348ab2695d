"""Shared fixtures. Integration fixtures find Cassandra and Kafka through the TICKD_* settings and fail
loudly (never skip) when they do not answer: `make test` starts them; so does `make infra-up`."""

from __future__ import annotations

import os

# Tests get their own keyspace unless the caller chose one (make test sets it).
os.environ.setdefault("TICKD_KEYSPACE", "tickd_test")

from hypothesis import settings as _hypothesis_settings

# Properties are about correctness, not speed: a busy 2-core CI machine must not fail them on time.
_hypothesis_settings.register_profile("tickd", deadline=None)
_hypothesis_settings.load_profile("tickd")
