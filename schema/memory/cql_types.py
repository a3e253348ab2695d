"""CQL column types: a bound value as Cassandra would store it (what ``engine`` keeps), and a stored value
as cassandra-driver returns it.

Stored: timestamps as aware UTC datetimes at millisecond precision (a naive one is bound as UTC, as the
driver does), sets as frozensets (an empty one is null: a tombstone), lists and tuples as tuples. Returned:
timestamps naive UTC, lists as lists, sets as frozensets (the driver's ``SortedSet`` compares equal to a
set), ``date`` as ``datetime.date`` (the driver's ``cassandra.util.Date`` is not modelled: no statement
reads a date column). A value of the wrong type is a ``TypeError``, as the driver's serializers raise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any
from uuid import UUID

from tickd.schema import timing
from tickd.schema.memory.cql_lexer import Cursor

Convert = Callable[[Any], Any]


@dataclass(frozen=True, slots=True)
class CqlType:
    name: str  # a scalar's name, or "set", "list", "tuple"
    params: tuple[CqlType, ...] = ()
    frozen: bool = False

    def __str__(self) -> str:
        inner = f"<{', '.join(map(str, self.params))}>" if self.params else ""
        return f"frozen<{self.name}{inner}>" if self.frozen else f"{self.name}{inner}"

    @property
    def bind(self) -> Convert:
        """A bound value (not None, not UNSET) as it is stored."""
        return _bind_collection(self) if self.name in ("set", "list", "tuple") else _SCALARS[self.name]

    @property
    def out(self) -> Convert | None:
        """A stored value as the driver returns it; None where it is the same."""
        return _output(self)


def parse_type(cursor: Cursor) -> CqlType:
    """``text``, ``set<text>``, ``frozen<list<frozen<tuple<int, timestamp>>>>`` ..."""
    name = cursor.name()
    if name == "frozen":
        cursor.expect("<")
        inner = parse_type(cursor)
        cursor.expect(">")
        return CqlType(inner.name, inner.params, frozen=True)
    if name in ("set", "list", "tuple"):
        cursor.expect("<")
        params = cursor.listed(lambda: parse_type(cursor))
        cursor.expect(">")
        if name != "tuple" and len(params) != 1:
            cursor.refuse(f"{name} of {len(params)} types")
        return CqlType(name, tuple(params), frozen=name == "tuple")
    if name not in _SCALARS:
        cursor.refuse(f"the type {name}")
    return CqlType(name)


def _bind_int(name: str, bits: int) -> Convert:
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1

    def bind(value: Any) -> int:
        if not isinstance(value, int) or not low <= value <= high:
            raise TypeError(f"Received an argument of invalid type for a {name} column: {value!r}")
        return value

    return bind


def _checked(
    python: type | tuple[type, ...], name: str, convert: Convert | None = None, refused: type | tuple[type, ...] = ()
) -> Convert:
    """A binder that takes instances of ``python`` (but not of ``refused``), as they are or ``convert``ed."""

    def bind(value: Any) -> Any:
        if not isinstance(value, python) or isinstance(value, refused):
            raise TypeError(f"Received an argument of invalid type for a {name} column: {type(value).__name__}")
        return value if convert is None else convert(value)

    return bind


def _bind_timestamp(value: Any) -> datetime:
    if isinstance(value, datetime) and value.tzinfo is UTC and not value.microsecond % 1000:
        return value  # already as stored: most values are (a row read back, a minute, a due time)
    if isinstance(value, datetime):
        moment = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        return timing.truncate_ms(moment)
    if isinstance(value, int) and not isinstance(value, bool):
        return timing.from_epoch_ms(value)  # the driver takes an int as milliseconds since the epoch
    raise TypeError(f"Received an argument of invalid type for a timestamp column: {type(value).__name__}")


# Each scalar type by name, with its binder (a type not named here is refused: ``parse_type``).
_SCALARS: dict[str, Convert] = {
    "text": _checked(str, "text"),
    "varchar": _checked(str, "varchar"),
    "ascii": _checked(str, "ascii"),
    "int": _bind_int("int", 32),
    "bigint": _bind_int("bigint", 64),
    "smallint": _bind_int("smallint", 16),
    "tinyint": _bind_int("tinyint", 8),
    "varint": _checked(int, "varint"),
    "boolean": _checked(bool, "boolean"),
    "double": _checked((int, float), "double", float, refused=bool),
    "float": _checked((int, float), "double", float, refused=bool),  # bound as a double is
    "uuid": _checked(UUID, "uuid"),
    "timeuuid": _checked(UUID, "timeuuid"),
    "blob": _checked((bytes, bytearray, memoryview), "blob", bytes),
    "timestamp": _bind_timestamp,
    "date": _checked(date, "date", refused=datetime),
}


def _bind_collection(t: CqlType) -> Convert:
    elements = [p.bind for p in t.params]

    def bind(value: Any) -> Any:
        if isinstance(value, str | bytes) or not hasattr(value, "__iter__"):
            raise TypeError(f"Received an argument of invalid type for a {t} column: {type(value).__name__}")
        if t.name == "tuple":
            items = tuple(value)
            if len(items) != len(elements):
                raise TypeError(f"a {t} holds {len(elements)} values, not {len(items)}")
            return tuple(None if v is None else b(v) for b, v in zip(elements, items, strict=True))
        if t.name == "set":
            return frozenset(elements[0](v) for v in value) or None  # an empty set is null
        items = tuple(elements[0](v) for v in value)
        return items if items or t.frozen else None  # an empty list is null unless frozen

    return bind


def _output(t: CqlType) -> Convert | None:
    if t.name == "timestamp":
        return _naive
    if t.name not in ("set", "list", "tuple"):
        return None
    inner = [p.out for p in t.params]
    if t.name == "set":
        return None if inner[0] is None else lambda v: frozenset(map(inner[0], v))  # type: ignore[arg-type]
    if t.name == "list":
        each = inner[0]
        return list if each is None else lambda v: [each(x) for x in v]

    def tuple_out(value: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(v if f is None or v is None else f(v) for f, v in zip(inner, value, strict=True))

    return tuple_out


def _naive(moment: datetime) -> datetime:
    return moment.replace(tzinfo=None)
