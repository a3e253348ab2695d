"""The tables of ``schema/cql/00*.cql`` as the in-memory store needs them: keys, clustering order, TTLs."""

from __future__ import annotations

from tickd.schema.memory.engine import Table

CLIENTS = Table("clients", ("client_id",))
SCHEDULES = Table("schedules", ("client_id", "poller_id", "minute"), ("due_at", "schedule_id"))
REFS = Table("schedule_refs", ("client_id", "schedule_id"))
IDEMPOTENCY_KEYS = Table("idempotency_keys", ("client_id", "key"), default_ttl_s=86400)
HOT_MARKS = Table("hot_marks", ("minute",), ("client_id", "poller_id"), default_ttl_s=7200)
HORIZONS = Table("instance_horizons", ("client_id", "poller_id"))
CLAIMS = Table("instance_claims", ("client_id", "poller_id"))
CHECKPOINTS = Table("checkpoints", ("client_id", "poller_id"))
SKIPPED = Table("skipped_minutes", ("client_id", "poller_id"), ("minute",), frozenset({"minute"}))
NODES = Table("nodes", ("cluster",), ("node_id",))
DEAD_LETTERS = Table("dead_letters", ("client_id", "day"), ("failed_at", "schedule_id"), frozenset({"failed_at"}))
RUNS = Table("runs", ("client_id", "schedule_id"), ("nominal_at",), frozenset({"nominal_at"}))
RUN_EVENTS = Table("run_events", ("client_id", "schedule_id", "nominal_at"), ("idx",))
POLICIES = Table("throttle_policies", ("client_id",), ("name",))
TOKENS = Table("throttle_tokens", ("client_id", "policy"), ("slot",))
SCHEDULE_KEYS = Table("schedule_keys", ("client_id", "key"))
CLIENT_STATS = Table("client_stats", ("client_id", "day"), ("minute", "writer"), default_ttl_s=691200)
