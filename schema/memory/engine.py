"""How Cassandra keeps rows, modelled in memory: just what tickd's statements rely on.

- A row is cells plus, if an INSERT wrote it, a row marker; it exists while the marker or any cell is
  live. An UPDATE writes cells only (so it creates a missing row, and a row whose cells all expire is
  gone); a DELETE is a row tombstone that shadows everything written at or below its timestamp.
- Every cell carries its write timestamp: a write lands only if it wins reconciliation (the higher
  timestamp; on a tie a tombstone beats an expiring cell beats a plain one, then the later expiry,
  then the greater value). Writing null, or an empty collection, writes a tombstone cell.
- TTLs count whole seconds as Cassandra does: a cell written at ``now`` with TTL ``t`` is live while
  ``floor(clock) < floor(now) + t``. An expired cell still shadows older writes (it is a tombstone).
- Reads return live rows in clustering order; ``page`` cuts them as a paged query does (a full page
  always promises another, possibly empty, page).

Timestamps are in microseconds, like the driver's. A lightweight transaction's writes carry its Paxos
ballot's timestamp, which Cassandra takes from a millisecond clock (``ballot``): a plain write made
earlier in the same millisecond has a higher timestamp, and wins over the transaction that follows it.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import math
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any
from uuid import UUID

from tickd.schema import timing
from tickd.schema.errors import StoreUnavailable

Key = tuple[Any, ...]


class Values(dict[str, Any]):
    """A row as the driver returns it: columns also by attribute, None for a missing (null) cell."""

    def __getattr__(self, column: str) -> Any:
        return self.get(column)


_U64 = 2**64 - 1
_EPOCH_DAY = date(1970, 1, 1).toordinal()
_MICROSECOND = timedelta(microseconds=1)
_MARKER = ""  # the row marker's slot among a row's cells


@dataclasses.dataclass(frozen=True, slots=True)
class Table:
    """A table's primary key: partition columns, clustering columns (``descending`` reverses some)."""

    name: str
    partition: tuple[str, ...]
    clustering: tuple[str, ...] = ()
    descending: frozenset[str] = frozenset()
    default_ttl_s: int = 0

    def split(self, key: Mapping[str, Any]) -> tuple[Key, Key]:
        return tuple(norm(key[c]) for c in self.partition), tuple(norm(key[c]) for c in self.clustering)

    def order(self, clustering: Key) -> tuple[Any, ...]:
        """The sort key of a row within its partition."""
        return tuple(
            _Desc(sort_key(v)) if c in self.descending else sort_key(v)
            for c, v in zip(self.clustering, clustering, strict=True)
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Write:
    """One statement's effect. ``values``: the columns it sets (None sets null; unset columns are absent)."""

    name: str
    table: Table
    key: Mapping[str, Any]
    values: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    ttl_s: int | None = None  # None: the table's default
    timestamp: int | None = None  # USING TIMESTAMP; None: the request's
    insert: bool = False  # an INSERT also writes the row marker
    delete: bool = False

    @property
    def partition(self) -> tuple[str, Key]:
        return self.table.name, self.table.split(self.key)[0]


@dataclasses.dataclass(frozen=True, slots=True)
class Cell:
    value: Any  # None: a tombstone
    ts: int
    # Expiring cells: when they die; tombstones: when they were written (Cassandra's local deletion time).
    until_s: int | None = None

    def live(self, now_s: int) -> bool:
        return self.value is not None and (self.until_s is None or now_s < self.until_s)

    def rank(self) -> tuple[int, int, int, bytes]:
        kind = 2 if self.value is None else 1 if self.until_s is not None else 0
        return self.ts, kind, self.until_s or 0, _raw(self.value)


@dataclasses.dataclass(slots=True)
class Row:
    cells: dict[str, Cell] = dataclasses.field(default_factory=dict)  # the row marker's among them
    deleted_ts: int | None = None
    # The row as last read, (from second, until second, (order, values) or None): kept until a write
    # lands on it or its first cell expires, so a partition read after a write to one row of it reuses
    # the others (and the answers made of them, ``cql.Output.shared_rows``).
    read: tuple[int, float, tuple[tuple[Any, ...], Values] | None] | None = None

    def put(self, column: str, cell: Cell) -> None:
        if self.deleted_ts is not None and cell.ts <= self.deleted_ts:
            return
        old = self.cells.get(column)
        if old is not None and old.rank() > cell.rank():
            return
        self.read = None
        self.cells[column] = cell

    def delete(self, ts: int) -> None:
        self.read = None
        self.deleted_ts = ts if self.deleted_ts is None else max(ts, self.deleted_ts)
        self.cells = {c: cell for c, cell in self.cells.items() if cell.ts > self.deleted_ts}

    def expires(self, now_s: int) -> float:
        """The first second at which one of this row's live cells dies (inf: none will)."""
        return min(
            (c.until_s for c in self.cells.values() if c.until_s is not None and c.live(now_s)), default=math.inf
        )

    def values(self, now_s: int) -> Values | None:
        """The live cells (the row marker left out), or None if the row does not exist now."""
        live = Values({c: cell.value for c, cell in self.cells.items() if cell.live(now_s)})
        marker = live.pop(_MARKER, None)
        return live if live or marker is not None else None


class Tables:
    """The data of every table, shared by all the adapters (processes) using one simulated cluster."""

    def __init__(self, clock: Callable[[], datetime]) -> None:
        self.clock = clock
        self._data: dict[str, dict[Key, dict[Key, Row]]] = {}
        self._last_ts = 0
        self._last_ballot = 0
        # A partition's live rows as last read, kept until a write to it or its first cell expiry
        # (read rows are never mutated by the adapters): the pollers re-read the same minutes often.
        self._reads: dict[tuple[str, Key], tuple[int, float, list[tuple[tuple[Any, ...], Values]]]] = {}

    def now_s(self) -> int:
        return math.floor(self.clock().timestamp())

    def timestamp(self) -> int:
        """A write timestamp: the clock's microseconds, made unique and increasing (the driver's
        monotonic generator). One source for every client: their clocks agree here."""
        self._last_ts = max(micros(self.clock()), self._last_ts + 1)
        return self._last_ts

    def ballot(self) -> int:
        """A lightweight transaction's write timestamp: the clock's milliseconds in microseconds, made
        unique and increasing (Cassandra's ``ClientState.getTimestampForPaxos``). Not above a plain
        write's timestamp from the same millisecond: a write that a transaction must see as older has
        to be written below it (``timing.below_ballots``)."""
        self._last_ballot = max(micros(self.clock()) // 1000 * 1000, self._last_ballot + 1)
        return self._last_ballot

    def apply(self, writes: Iterable[Write], ts: int) -> None:
        now_s = self.now_s()
        for write in writes:
            self._apply(write, write.timestamp if write.timestamp is not None else ts, now_s)

    def _apply(self, w: Write, ts: int, now_s: int) -> None:
        ttl = w.table.default_ttl_s if w.ttl_s is None else w.ttl_s
        if not 0 <= ttl <= timing.MAX_TTL_S:
            raise StoreUnavailable(f"{w.name}: InvalidRequest: TTL {ttl} out of range")
        partition, clustering = w.table.split(w.key)
        self._reads.pop((w.table.name, partition), None)
        row = self._data.setdefault(w.table.name, {}).setdefault(partition, {}).setdefault(clustering, Row())
        if w.delete:
            row.delete(ts)
            return
        until = now_s + ttl if ttl else None
        if w.insert:
            row.put(_MARKER, Cell(True, ts, until))
        for column, value in w.values.items():
            value = norm(value)
            row.put(column, Cell(None, ts, now_s) if value is None else Cell(value, ts, until))

    def row(self, table: Table, key: Mapping[str, Any]) -> Values | None:
        """The live row at a full primary key, key columns included."""
        partition, clustering = table.split(key)
        row = self._data.get(table.name, {}).get(partition, {}).get(clustering)
        values = row.values(self.now_s()) if row is not None else None
        return None if values is None else _with_key(table, partition, clustering, values)

    def partition(self, table: Table, key: Mapping[str, Any]) -> list[tuple[tuple[Any, ...], Values]]:
        """The live rows of one partition in clustering order, each with its sort key."""
        partition = tuple(norm(key[c]) for c in table.partition)
        return self._live(table, partition, self._data.get(table.name, {}).get(partition, {}))

    def scan(self, table: Table) -> list[tuple[tuple[Any, ...], Values]]:
        """Every live row of a table, partitions in key order (Cassandra's token order is not modelled)."""
        found = []
        for partition, rows in self._data.get(table.name, {}).items():
            found += [((sort_key(partition), order), v) for order, v in self._live(table, partition, rows)]
        return sorted(found, key=lambda item: item[0])

    def _live(self, table: Table, partition: Key, rows: Mapping[Key, Row]) -> list[tuple[tuple[Any, ...], Values]]:
        now_s = self.now_s()
        cached = self._reads.get((table.name, partition))
        if cached is not None and cached[0] <= now_s < cached[1]:
            return cached[2]
        found = []
        expires = math.inf
        for clustering, row in rows.items():
            read = row.read
            if read is None or not read[0] <= now_s < read[1]:
                read = row.read = (now_s, row.expires(now_s), _item(table, partition, clustering, row, now_s))
            if read[2] is not None:
                found.append(read[2])
            expires = min(expires, read[1])
        found.sort(key=_order)
        self._reads[(table.name, partition)] = (now_s, expires, found)
        return found


def page(rows: Sequence[tuple[Any, Values]], after: Any | None, size: int) -> tuple[list[Values], Any | None]:
    """The page of ``size`` rows following position ``after``, and where the next page starts (None:
    no more pages). A full page always has a next one, as Cassandra's paging does."""
    start = 0 if after is None else bisect.bisect_right(rows, after, key=_order)  # rows are in order
    chunk = rows[start : start + size]
    return [v for _, v in chunk], chunk[-1][0] if len(chunk) == size and chunk else None


def _order(item: tuple[Any, Values]) -> Any:
    return item[0]


def micros(moment: datetime) -> int:
    return (moment.astimezone(UTC) - datetime(1970, 1, 1, tzinfo=UTC)) // _MICROSECOND


def norm(value: Any) -> Any:
    """A value as Cassandra would return it: times in UTC at millisecond precision, empty sets null."""
    if isinstance(value, datetime):
        if value.tzinfo is UTC and not value.microsecond % 1000:
            return value  # already normal (the CQL connection binds values so): spare the copies
        return timing.truncate_ms(value.astimezone(UTC))
    if isinstance(value, set | frozenset):
        return frozenset(value) or None
    return value


def sort_key(value: Any) -> Any:
    """How Cassandra orders a clustering value. Only ``uuid`` differs from Python: by version first,
    then the time of a v1 id or the raw bytes of any other (so v4 ids sort before v5 ids)."""
    if isinstance(value, UUID):
        version = (value.int >> 76) & 0xF
        return version, value.time if version == 1 else value.int >> 64, value.int & _U64
    if isinstance(value, tuple):
        return tuple(sort_key(v) for v in value)
    return value


@functools.total_ordering
class _Desc:
    """A sort key in reverse, for ``CLUSTERING ORDER BY (... DESC)``."""

    __slots__ = ("key",)

    def __init__(self, key: Any) -> None:
        self.key = key

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Desc) and self.key == other.key

    def __lt__(self, other: _Desc) -> bool:
        return bool(other.key < self.key)

    def __hash__(self) -> int:
        return hash(self.key)


def _item(table: Table, partition: Key, clustering: Key, row: Row, now_s: int) -> tuple[Any, Values] | None:
    """A live row as a read lists it: (its order in the partition, its values with the key columns)."""
    values = row.values(now_s)
    return None if values is None else (table.order(clustering), _with_key(table, partition, clustering, values))


def _with_key(table: Table, partition: Key, clustering: Key, values: Values) -> Values:
    row = Values(zip(table.partition, partition, strict=True))
    row.update(zip(table.clustering, clustering, strict=True))
    row.update(values)
    return row


def _raw(value: Any) -> bytes:
    """A value's serialized bytes, which Cassandra compares to reconcile two cells of equal timestamp."""
    if value is None:
        return b""
    if isinstance(value, bool):
        return b"\x01" if value else b"\x00"
    if isinstance(value, int):
        return (value & _U64).to_bytes(8, "big")
    if isinstance(value, float):  # a double
        return struct.pack(">d", value)
    if isinstance(value, datetime):
        return (timing.to_epoch_ms(value) & _U64).to_bytes(8, "big")
    if isinstance(value, date):
        return (value.toordinal() - _EPOCH_DAY + 2**31).to_bytes(4, "big")
    if isinstance(value, UUID):
        return value.bytes
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, frozenset):
        return b"\x00".join(sorted(_raw(v) for v in value))
    if isinstance(value, tuple):  # a frozen list or tuple
        return b"\x00".join(_raw(v) for v in value)
    return bytes(value)
