"""``tickd-migrate``: create the keyspace (replication from settings) and apply ``cql/NNN_*.cql`` once each.

Idempotent: applied versions are recorded in ``schema_migrations``; every statement also uses
``IF NOT EXISTS`` so a run interrupted half-way can simply be run again.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime

import structlog
from cassandra.cluster import Session

from tickd.schema import logs, queries
from tickd.schema.cassandra import build_cluster, connect_refusal
from tickd.schema.errors import ConfigError
from tickd.schema.settings import StoreSettings, parse_replication

log = structlog.get_logger("tickd.migrate")


def statements(text: str) -> list[str]:
    """Split a CQL file on semicolons that end a line, dropping comment lines."""
    body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
    return [part.strip() for part in body.split(";\n") if part.strip().rstrip(";")]


def replication_cql(replication: str) -> str:
    options = parse_replication(replication)
    return "{" + ", ".join(f"'{k}': '{v}'" for k, v in options.items()) + "}"


def applied_versions(session: Session) -> set[int]:
    session.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations "
        "(version int PRIMARY KEY, name text, checksum text, applied_at timestamp)"
    )
    return {row.version for row in session.execute("SELECT version FROM schema_migrations")}


def migrate(settings: StoreSettings) -> list[str]:
    """Apply what is missing; returns the names of the files applied now."""
    cluster = build_cluster(settings)
    try:
        session = cluster.connect()
        session.execute(
            f"CREATE KEYSPACE IF NOT EXISTS {settings.keyspace} "
            f"WITH replication = {replication_cql(settings.replication)}"
        )
        session.set_keyspace(settings.keyspace)
        done = applied_versions(session)
        applied = []
        for version, name, text in queries.migrations():
            if version in done:
                continue
            for statement in statements(text):
                session.execute(statement)
            session.execute(
                "INSERT INTO schema_migrations (version, name, checksum, applied_at) VALUES (%s, %s, %s, %s)",
                (version, name, hashlib.sha256(text.encode()).hexdigest(), datetime.now(UTC)),
            )
            log.info("migration_applied", keyspace=settings.keyspace, version=version, file=name)
            applied.append(name)
        return applied
    finally:
        cluster.shutdown()


def pending(settings: StoreSettings) -> list[str]:
    """The migration files not applied yet (all of them if the keyspace does not exist). Reads only."""
    cluster = build_cluster(settings)
    try:
        session = cluster.connect()
        if session.cluster.metadata.keyspaces.get(settings.keyspace) is None:
            return [name for _, name, _ in queries.migrations()]
        rows = session.execute(f"SELECT version FROM {settings.keyspace}.schema_migrations")
        done = {row.version for row in rows}
        return [name for version, name, _ in queries.migrations() if version not in done]
    finally:
        cluster.shutdown()


def wait_migrated(settings: StoreSettings, timeout_s: float, poll_s: float = 2.0) -> list[str]:
    """Wait until every migration is applied (by someone else, e.g. the migration Job), or the deadline
    passes; returns what is still pending then. Cassandra not answering yet counts as pending."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            left = pending(settings)
        except Exception as exc:  # not reachable yet, or the table is not there yet: keep waiting
            refusal = connect_refusal(settings, exc)
            if refusal is not None:  # wrong credentials or certificates: waiting will not fix them
                raise refusal from exc
            left = [f"(store not ready: {type(exc).__name__})"]
        if not left or time.monotonic() >= deadline:
            return left
        log.info("waiting_for_migrations", keyspace=settings.keyspace, pending=left)
        time.sleep(poll_s)


def drop(settings: StoreSettings) -> None:
    """Drop the keyspace (tests and benchmarks only: refused unless the name contains 'test' or 'bench')."""
    if "test" not in settings.keyspace and "bench" not in settings.keyspace:
        raise ConfigError(f"refusing to drop keyspace {settings.keyspace!r}: only test or bench keyspaces")
    cluster = build_cluster(settings)
    try:
        cluster.connect().execute(f"DROP KEYSPACE IF EXISTS {settings.keyspace}", timeout=60)
    finally:
        cluster.shutdown()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tickd-migrate", description=__doc__)
    parser.add_argument("--drop", action="store_true", help="drop the (test) keyspace instead of migrating")
    parser.add_argument(
        "--wait",
        type=float,
        metavar="SECONDS",
        help="apply nothing: wait up to SECONDS until every migration has been applied (an init container "
        "waiting for the migration Job); exit 1 if some are still pending then",
    )
    args = parser.parse_args(argv)
    logs.configure()
    try:
        settings = StoreSettings.from_env()
        if args.wait is not None:
            left = wait_migrated(settings, args.wait)
            if left:
                print(f"tickd-migrate: still pending after {args.wait:g} s: {', '.join(left)}", file=sys.stderr)
                return 1
            log.info("migrations_present", keyspace=settings.keyspace)
            return 0
        if args.drop:
            drop(settings)
            log.info("keyspace_dropped", keyspace=settings.keyspace)
            return 0
        applied = migrate(settings)
    except ConfigError as exc:
        print(f"tickd-migrate: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # a CLI: say what failed, exit non-zero
        refusal = connect_refusal(settings, exc)
        print(f"tickd-migrate: {refusal or f'{type(exc).__name__}: {exc}'}", file=sys.stderr)
        return 1
    log.info("migrations_done", keyspace=settings.keyspace, applied=len(applied))
    return 0


if __name__ == "__main__":
    sys.exit(main())
