import pytest

from tickd.schema import queries
from tickd.schema.errors import ConfigError
from tickd.schema.migrate import replication_cql, statements
from tickd.schema.settings import StoreSettings, parse_replication


def test_every_query_parses_with_flags() -> None:
    loaded = queries.load()
    assert loaded["read_minute"].idempotent
    assert not loaded["take_claim"].idempotent  # a lightweight transaction is never retried blindly
    assert all(q.cql and not q.cql.endswith(";") and "--" not in q.cql for q in loaded.values())


def test_the_only_lightweight_transaction_sent_twice_is_the_idempotency_key_reservation() -> None:
    """A compare-and-set sent again after it applied would fail its condition and be read as lost, all but
    the reservation, whose row names the caller's own schedule id (schema.cassandra.schedules)."""
    loaded = queries.load()
    lwts = {q.name for q in loaded.values() if " IF " in f" {q.cql.upper()} "}
    assert {"take_claim", "bump_ref", "reserve_idempotency_key"} <= lwts
    assert {n for n in lwts if loaded[n].idempotent} == {"reserve_idempotency_key"}


def test_every_query_binds_by_name() -> None:
    positional = [q.name for q in queries.load().values() if "?" in q.cql]
    assert positional == []


def test_duplicate_query_name_is_refused() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        queries.parse("-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;\n")


def test_a_statement_may_cap_its_page() -> None:
    parsed = queries.parse("-- name: a\n-- flags: idempotent\n-- page: 500\nSELECT 1;\n-- name: b\nSELECT 2;\n")
    assert (parsed["a"].page, parsed["a"].idempotent, parsed["a"].cql) == (500, True, "SELECT 1")
    assert parsed["b"].page is None
    assert queries.load()["read_stats"].page == 500  # a day of a client's statistics: thousands of wide rows
    with pytest.raises(ValueError, match="at least one row"):
        queries.parse("-- name: a\n-- page: 0\nSELECT 1;\n")


def test_migration_files_split_into_statements() -> None:
    (version, name, text), *_ = queries.migrations()
    assert version == 1 and name.startswith("001_")
    parts = statements(text)
    assert all(p.upper().startswith("CREATE TABLE IF NOT EXISTS") for p in parts)
    assert len(parts) >= 10


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("SimpleStrategy:1", {"class": "SimpleStrategy", "replication_factor": "1"}),
        ("NetworkTopologyStrategy:dc1=3,dc2=3", {"class": "NetworkTopologyStrategy", "dc1": "3", "dc2": "3"}),
    ],
)
def test_replication_parses(raw: str, expected: dict[str, str]) -> None:
    assert parse_replication(raw) == expected
    assert replication_cql(raw).startswith("{'class': ")


@pytest.mark.parametrize("raw", ["", "SimpleStrategy", "SimpleStrategy:0", "Foo:1", "NetworkTopologyStrategy:dc1"])
def test_bad_replication_is_refused(raw: str) -> None:
    with pytest.raises(ConfigError, match="TICKD_REPLICATION"):
        parse_replication(raw)


def test_settings_defaults_and_overrides() -> None:
    assert StoreSettings.from_env({}) == StoreSettings()
    s = StoreSettings.from_env({"TICKD_CASSANDRA_HOSTS": "a, b", "TICKD_CONSISTENCY": "quorum"})
    assert s.hosts == ("a", "b") and s.consistency == "QUORUM"


@pytest.mark.parametrize(
    ("env", "name"),
    [
        ({"TICKD_CASSANDRA_PORT": "x"}, "TICKD_CASSANDRA_PORT"),
        ({"TICKD_CASSANDRA_PORT": "70000"}, "TICKD_CASSANDRA_PORT"),
        ({"TICKD_CONSISTENCY": "MOST"}, "TICKD_CONSISTENCY"),
        ({"TICKD_KEYSPACE": "1bad"}, "TICKD_KEYSPACE"),
        ({"TICKD_KEYSPACE": "drop;table"}, "TICKD_KEYSPACE"),
        ({"TICKD_CASSANDRA_HOSTS": " , "}, "TICKD_CASSANDRA_HOSTS"),
        ({"TICKD_RETENTION_S": "5"}, "TICKD_RETENTION_S"),
    ],
)
def test_bad_settings_name_the_variable(env: dict[str, str], name: str) -> None:
    with pytest.raises(ConfigError) as info:
        StoreSettings.from_env(env)
    assert info.value.field == name and name in str(info.value)
