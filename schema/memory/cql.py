"""tickd's own CQL, executed in memory: each statement of ``queries.cql`` is compiled once, when it is
prepared, into a plan over ``engine.Tables``, with the tables read from the migrations (``cql_schema``).

The subset (anything else is refused when the statement is prepared, naming it and the construct):

- ``SELECT col, ... FROM t [WHERE ...] [LIMIT n]``: no WHERE is a scan of the whole table; else every
  partition key column by ``=``, then clustering columns by ``=`` in order, then one of them by a slice
  (``>``, ``>=``, ``<``, ``<=``, one bound each way) or a tuple of the next ones (``(a, b) > (:x, :y)``).
  Rows come in clustering order, values compared as Cassandra orders them (``engine.sort_key``).
  ``SELECT ... FROM system.local`` answers one row (``ping``).
- ``INSERT INTO t (cols) VALUES (terms) [IF NOT EXISTS] [USING TTL t AND TIMESTAMP ts]``: the row marker
  and cells; ``UPDATE t [USING ...] SET col = term, ... WHERE <full key> [IF ...]``: cells only;
  ``DELETE [cols] FROM t [USING TIMESTAMP ts] WHERE <full key> [IF ...]``: a row tombstone, or cell
  tombstones for the columns named. A null value, or an empty set, writes a tombstone; an UNSET one
  writes nothing (and an UNSET TTL or timestamp is the table's default, the request's timestamp).
- Conditions: ``IF NOT EXISTS``, ``IF EXISTS``, ``IF col = term [AND ...]`` (``= null`` included): a
  lightweight transaction, written at ``Tables.ballot()``; it answers ``[applied]``, and when not applied
  the current values of the condition's columns (the whole row for IF NOT EXISTS; nothing more when the
  row does not exist), as Cassandra does. A missing row satisfies ``col = null``, as in Cassandra.
- Terms: ``:name`` markers (bound by name, converted by their column's type: ``cql_types``) and
  literals (strings, numbers, true/false, null).

Values come back as cassandra-driver returns them (``cql_types``), in its row type (``bridge.rows_of``).
Request-time errors Cassandra would answer (a null key, a TTL out of range, a LIMIT below 1) are the
driver's ``InvalidRequest``, so the bridge maps them as it maps the server's.
"""

from __future__ import annotations

import bisect
import functools
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cassandra import InvalidRequest
from cassandra.query import UNSET_VALUE

from tickd.schema import queries, timing
from tickd.schema.cassandra.bridge import Page, rows_of
from tickd.schema.memory import cql_schema
from tickd.schema.memory.cql_lexer import Cursor, UnsupportedCql
from tickd.schema.memory.cql_schema import Schema, TableDef
from tickd.schema.memory.cql_types import Convert, CqlType
from tickd.schema.memory.engine import Tables, Values, Write, page, sort_key

APPLIED = "[applied]"
RELEASE_VERSION = "4.1-tickd-memory"
_SYSTEM_LOCAL = {"release_version": RELEASE_VERSION, "cluster_name": "memory", "data_center": "memory"}
_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "=": operator.eq,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
_INT = CqlType("int")
_BIGINT = CqlType("bigint")


# -- terms -------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Term:
    """A value in a statement: a bind marker (converted by ``convert``) or a literal (already converted)."""

    what: str  # the column (or TTL, TIMESTAMP, LIMIT) it is the value of, for messages
    marker: str | None
    literal: Any = None
    convert: Convert | None = None

    def get(self, values: Mapping[str, Any]) -> Any:
        """The stored form of the value, None for null, or UNSET_VALUE."""
        if self.marker is None:
            return self.literal
        value = values[self.marker]
        if value is None or value is UNSET_VALUE or self.convert is None:
            return value
        return self.convert(value)

    def required(self, values: Mapping[str, Any]) -> Any:
        """The value, which must be neither null nor unset (a key, a bound)."""
        value = self.get(values)
        if value is None:
            raise InvalidRequest(f"Invalid null value in condition for column {self.what}")
        if value is UNSET_VALUE:
            raise InvalidRequest(f"Invalid unset value for column {self.what}")
        return value


# A statement's terms by column, unpacked for the per-request loops below: (column, marker, literal,
# convert, term). Binding is most of what a write costs; a method call per term was a third of it.
Bindings = tuple[tuple[str, str | None, Any, Convert | None, Term], ...]


def bindings(pairs: Iterable[tuple[str, Term]]) -> Bindings:
    return tuple((column, t.marker, t.literal, t.convert, t) for column, t in pairs)


def bind_cells(cells: Bindings, values: Mapping[str, Any]) -> dict[str, Any]:
    """The columns a write sets, by their stored values (None: a tombstone); UNSET ones left out."""
    found = {}
    for column, marker, literal, convert, _ in cells:
        if marker is None:
            found[column] = literal
            continue
        value = values[marker]
        if value is not UNSET_VALUE:
            found[column] = value if value is None or convert is None else convert(value)
    return found


def bind_key(key: Bindings, values: Mapping[str, Any]) -> dict[str, Any]:
    """Key columns by value; a null or UNSET one is the server's ``InvalidRequest``."""
    found = {}
    for column, marker, literal, convert, term in key:
        value = literal if marker is None else values[marker]
        if value is None or value is UNSET_VALUE:
            term.required(values)
        found[column] = value if marker is None or convert is None else convert(value)
    return found


def _term(cursor: Cursor, what: str, kind: CqlType) -> Term:
    token = cursor.next()
    if token.kind == "marker":
        return Term(what, token.text, convert=kind.bind)
    if token.kind == "name" and token.text == "null":
        return Term(what, None)
    if token.kind == "name" and token.text in ("true", "false") and kind.name == "boolean":
        return Term(what, None, token.text == "true")
    if token.kind == "string" and kind.name in ("text", "varchar", "ascii"):
        return Term(what, None, token.text)
    if token.kind == "number" and kind.name in ("int", "bigint", "smallint", "tinyint", "varint"):
        return Term(what, None, int(token.text))
    if token.kind == "number" and kind.name in ("double", "float"):
        return Term(what, None, float(token.text))
    cursor.refuse(f"the value {token} for {what} ({kind}): only :markers, null and literals of simple types")


# -- WHERE -------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Relation:
    columns: tuple[str, ...]  # one column, or a tuple's
    op: str
    terms: tuple[Term, ...]


def _relation(cursor: Cursor, table: TableDef) -> Relation:
    columns = tuple(cursor.names()) if cursor.is_word("(") else (cursor.name(),)
    op = cursor.next().text
    if op not in _COMPARE:
        cursor.refuse(f"the relation {op} (only =, <, <=, >, >=)")
    if len(columns) == 1:
        return Relation(columns, op, (_term(cursor, columns[0], table.type_of(columns[0], cursor)),))
    if op == "=":
        cursor.refuse("a tuple relation by = (name each column)")
    cursor.expect("(")
    terms = [_term(cursor, columns[0], table.type_of(columns[0], cursor))]
    for column in columns[1:]:
        cursor.expect(",")
        terms.append(_term(cursor, column, table.type_of(column, cursor)))
    cursor.expect(")")
    return Relation(columns, op, tuple(terms))


@dataclass(frozen=True, slots=True)
class Where:
    """Restrictions by the primary key: the partition by ``=``, a clustering prefix by ``=``, slices after."""

    table: TableDef
    partition: tuple[Term, ...]
    clustering: tuple[Term, ...]  # ``=`` on the first clustering columns, in order
    slices: tuple[Relation, ...] = ()  # on the next clustering column, or a tuple of the next ones
    named: Bindings = field(init=False)

    def __post_init__(self) -> None:
        terms = (*self.partition, *self.clustering)
        object.__setattr__(self, "named", bindings(zip(self.table.key, terms, strict=False)))

    def key(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The primary key columns restricted by ``=``, by value."""
        return bind_key(self.named, values)


def _where(cursor: Cursor, table: TableDef, *, full_key: bool) -> Where:
    """The relations after WHERE, checked as Cassandra does (without ALLOW FILTERING), by key column."""
    t = table.table
    relations = cursor.listed(lambda: _relation(cursor, table), "and")
    equal: dict[str, Term] = {}
    slices: list[Relation] = []
    for r in relations:
        unknown = [c for c in r.columns if c not in table.key]
        if unknown:
            cursor.refuse(f"a restriction on {unknown[0]}, not a primary key column (needs filtering)")
        if r.op == "=" and len(r.columns) == 1:
            if r.columns[0] in equal:
                cursor.refuse(f"{r.columns[0]} restricted twice by =")
            equal[r.columns[0]] = r.terms[0]
        elif r.columns[0] in t.partition:
            cursor.refuse(f"a range over the partition key column {r.columns[0]}")
        else:
            slices.append(r)
    missing = [c for c in t.partition if c not in equal]
    if missing:
        cursor.refuse(f"the partition key column {missing[0]} not restricted by =")
    prefix = 0
    while prefix < len(t.clustering) and t.clustering[prefix] in equal:
        prefix += 1
    stray = [c for c in t.clustering[prefix:] if c in equal]
    if stray:
        cursor.refuse(f"{stray[0]} restricted by = after an unrestricted clustering column")
    _check_slices(cursor, t.clustering[prefix:], slices)
    if full_key and (slices or prefix < len(t.clustering)):
        cursor.refuse("a write to a range of rows or a whole partition (name every primary key column by =)")
    partition = tuple(equal[c] for c in t.partition)
    return Where(table, partition, tuple(equal[c] for c in t.clustering[:prefix]), tuple(slices))


def _check_slices(cursor: Cursor, rest: Sequence[str], slices: list[Relation]) -> None:
    lower = [s for s in slices if s.op in (">", ">=")]
    upper = [s for s in slices if s.op in ("<", "<=")]
    if len(lower) > 1 or len(upper) > 1:
        cursor.refuse("more than one bound on one side of a clustering range")
    for s in slices:
        if tuple(rest[: len(s.columns)]) != s.columns:
            cursor.refuse(
                f"a range on {', '.join(s.columns)}: it must start at the first clustering column not restricted by ="
            )


# -- plans -------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Marker:
    """What the bridge reads of a prepared statement's bind markers (the driver's column metadata)."""

    name: str


@dataclass(slots=True)
class Prepared:
    """A prepared statement, as the bridge uses the driver's: its text, markers, flags and page size."""

    name: str
    query_string: str
    plan: Plan
    column_metadata: list[Marker]
    is_idempotent: bool = False
    fetch_size: int = 5000


class Plan:
    """One compiled statement."""

    def execute(self, tables: Tables, values: Mapping[str, Any], ts: int, state: Any, page_size: int) -> Page:
        """Run it alone at write timestamp ``ts``: a page of its rows (from ``state``)."""
        raise NotImplementedError

    def batched(self, values: Mapping[str, Any]) -> Write:
        """Its write as part of a batch."""
        raise InvalidRequest(f"{type(self).__name__}: only UPDATE, INSERT and DELETE statements are allowed in a batch")


@dataclass(frozen=True, slots=True)
class Output:
    """The columns a statement answers, converted as the driver returns them."""

    columns: tuple[str, ...]
    converters: tuple[Convert | None, ...]

    @staticmethod
    def of(table: TableDef, columns: Sequence[str]) -> Output:
        return Output(tuple(columns), tuple(table.columns[c].out for c in columns))

    def row(self, values: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(
            v if f is None or v is None else f(v)
            for f, v in zip(self.converters, map(values.get, self.columns), strict=True)
        )

    def rows(self, found: Sequence[Mapping[str, Any]]) -> list[Any]:
        return rows_of(list(self.columns), [self.row(v) for v in found])

    def shared_rows(self, found: Sequence[Values]) -> list[Any]:
        """``rows`` of the engine's kept partition reads, each answer made once per stored row and column
        list: the engine hands out the same row objects until the partition is written (and never
        changes them), the answers are immutable named tuples, and pollers re-read the same minutes."""
        made = []
        for values in found:
            memo = values.__dict__.setdefault(_ANSWERS, {})
            row = memo.get(self.columns)
            if row is None:
                row = memo[self.columns] = rows_of(list(self.columns), [self.row(values)])[0]
            made.append(row)
        return made


_ANSWERS = "_cql_answers"  # where Output.shared_rows keeps a stored row's answers


@dataclass(frozen=True, slots=True)
class Select(Plan):
    table: TableDef
    output: Output
    where: Where | None  # None: the whole table
    limit: Term | None
    single: bool = field(init=False)

    # Slices on ascending clustering columns right after the partition key: the partition's rows are in
    # that order, so a slice is a range found by bisection instead of a test of every row.
    sorted_slices: bool = field(init=False)

    def __post_init__(self) -> None:
        w, t = self.where, self.table.table
        object.__setattr__(self, "single", w is not None and len(w.clustering) == len(t.clustering))
        sorted_slices = w is not None and not w.clustering and bool(w.slices)
        if w is not None:
            sorted_slices = sorted_slices and not any(c in t.descending for s in w.slices for c in s.columns)
        object.__setattr__(self, "sorted_slices", sorted_slices)

    def execute(self, tables: Tables, values: Mapping[str, Any], ts: int, state: Any, page_size: int) -> Page:
        limit = self._limit(values)
        after, taken = state if state is not None else (None, 0)
        size = page_size if limit is None else min(page_size, limit - taken)
        found, position = page(self._candidates(tables, values), after, size)
        taken += len(found)
        more = position is not None and (limit is None or taken < limit)
        rows = self.output.rows(found) if self.single else self.output.shared_rows(found)
        return Page(rows, (position, taken) if more else None)

    def _limit(self, values: Mapping[str, Any]) -> int | None:
        limit = self.limit.get(values) if self.limit is not None else UNSET_VALUE
        if limit is UNSET_VALUE:
            return None
        if limit is None:
            raise InvalidRequest("Invalid null value of limit")
        if limit <= 0:
            raise InvalidRequest("LIMIT must be strictly positive")
        return int(limit)

    def _candidates(self, tables: Tables, values: Mapping[str, Any]) -> Sequence[tuple[Any, Values]]:
        table = self.table.table
        if self.where is None:
            return tables.scan(table)
        key = self.where.key(values)
        if self.single:
            row = tables.row(table, key)
            return [((), row)] if row is not None else []
        rows = tables.partition(table, key)
        # Each slice's bound, as the sort key of its columns (one value, or a tuple of several).
        bounds = [(s, tuple(sort_key(term.required(values)) for term in s.terms)) for s in self.where.slices]
        if self.sorted_slices:
            return _sliced(rows, bounds)
        tests = [_equal_to(c, key[c]) for c in table.clustering[: len(self.where.clustering)]]
        tests += [_slice(s.columns, _COMPARE[s.op], bound) for s, bound in bounds]
        return [item for item in rows if all(test(item[1]) for test in tests)] if tests else rows


def _sliced(
    rows: Sequence[tuple[Any, Values]], bounds: list[tuple[Relation, tuple[Any, ...]]]
) -> Sequence[tuple[Any, Values]]:
    """The rows (in clustering order) within every slice's bound."""
    lo, hi = 0, len(rows)
    for s, bound in bounds:
        op, width = s.op, len(bound)
        key, value = (_first, bound[0]) if width == 1 else (functools.partial(_leading, width), bound)
        if op in (">", ">=", "="):
            lo = max(lo, (bisect.bisect_right if op == ">" else bisect.bisect_left)(rows, value, lo, hi, key=key))
        if op in ("<", "<=", "="):
            hi = min(hi, (bisect.bisect_left if op == "<" else bisect.bisect_right)(rows, value, lo, hi, key=key))
    return rows[lo:hi] if lo < hi else []


def _first(item: tuple[Any, Values]) -> Any:
    return item[0][0]


def _leading(width: int, item: tuple[Any, Values]) -> Any:
    return item[0][:width]


def _equal_to(column: str, value: Any) -> Callable[[Values], bool]:
    return lambda row: bool(row[column] == value)


def _slice(
    columns: tuple[str, ...], compare: Callable[[Any, Any], bool], bound: tuple[Any, ...]
) -> Callable[[Values], bool]:
    if len(columns) == 1:
        column, single = columns[0], bound[0]
        return lambda row: compare(sort_key(row[column]), single)
    return lambda row: compare(tuple(sort_key(row[c]) for c in columns), bound)


@dataclass(frozen=True, slots=True)
class SystemLocal(Plan):
    output: tuple[str, ...]

    def execute(self, tables: Tables, values: Mapping[str, Any], ts: int, state: Any, page_size: int) -> Page:
        return Page(rows_of(list(self.output), [tuple(_SYSTEM_LOCAL[c] for c in self.output)]), None)


NOT_EXISTS = "not exists"
EXISTS = "exists"


@dataclass(frozen=True, slots=True)
class Modify(Plan):
    """INSERT, UPDATE or DELETE: one row's write, or a lightweight transaction on it."""

    name: str
    table: TableDef
    where: Where
    cells: tuple[tuple[str, Term], ...]
    ttl: Term | None
    timestamp: Term | None
    insert: bool = False
    delete: bool = False
    condition: str | tuple[tuple[str, Term], ...] | None = None  # NOT_EXISTS, EXISTS, or columns = terms
    bound_cells: Bindings = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "bound_cells", bindings(self.cells))

    def batched(self, values: Mapping[str, Any]) -> Write:
        if self.condition is not None:
            raise UnsupportedCql(f"{self.name}: a conditional statement in a batch (not modelled in memory)")
        return self.write(values)

    def write(self, values: Mapping[str, Any]) -> Write:
        cells = bind_cells(self.bound_cells, values)
        key = self.where.key(values)
        return Write(
            self.name,
            self.table.table,
            key,
            cells,
            self._ttl(values),
            self._timestamp(values),
            self.insert,
            self.delete,
        )

    def _ttl(self, values: Mapping[str, Any]) -> int | None:
        ttl = self.ttl.get(values) if self.ttl is not None else UNSET_VALUE
        if ttl is UNSET_VALUE:
            return None  # the table's default
        if ttl is None:
            return 0
        if ttl < 0:
            raise InvalidRequest(f"A TTL must be greater or equal to 0, but was {ttl}")
        if ttl > timing.MAX_TTL_S:
            raise InvalidRequest(f"ttl is too large. requested ({ttl}) maximum ({timing.MAX_TTL_S})")
        return int(ttl)

    def _timestamp(self, values: Mapping[str, Any]) -> int | None:
        ts = self.timestamp.get(values) if self.timestamp is not None else UNSET_VALUE
        if ts is UNSET_VALUE:
            return None  # the request's
        if ts is None:
            raise InvalidRequest("Invalid null value of timestamp")
        return int(ts)

    def execute(self, tables: Tables, values: Mapping[str, Any], ts: int, state: Any, page_size: int) -> Page:
        write = self.write(values)
        if self.condition is None:
            tables.apply([write], ts)
            return Page([], None)
        return Page(self._transaction(tables, write, values), None)

    def _transaction(self, tables: Tables, write: Write, values: Mapping[str, Any]) -> list[Any]:
        current = tables.row(write.table, write.key)
        if self.condition == NOT_EXISTS:
            applied, shown = current is None, self.table.ordered_columns()
        elif self.condition == EXISTS:
            applied, shown = current is not None, []
        else:
            assert isinstance(self.condition, tuple)
            found = current if current is not None else {}
            applied = all(found.get(c) == _condition_value(term, values) for c, term in self.condition)
            shown = list(dict.fromkeys(c for c, _ in self.condition))
        if applied:
            tables.apply([write], tables.ballot())
        if applied or current is None:
            return rows_of([APPLIED], [(applied,)])
        output = Output.of(self.table, shown)
        return rows_of([APPLIED, *shown], [(False, *output.row(current))])


def _condition_value(term: Term, values: Mapping[str, Any]) -> Any:
    value = term.get(values)
    if value is UNSET_VALUE:
        raise InvalidRequest(f"Invalid 'unset' value in condition on {term.what}")
    return value


# -- statements --------------------------------------------------------------------------------------------


def prepare(query: queries.Query) -> Prepared:
    """``query`` compiled; ``UnsupportedCql`` (naming it and the construct) if it is outside the subset."""
    plan, markers = compile_statement(query.name, query.cql)
    return Prepared(query.name, query.cql, plan, [Marker(m) for m in markers], query.idempotent)


@functools.lru_cache(maxsize=256)
def compile_statement(name: str, cql: str) -> tuple[Plan, tuple[str, ...]]:
    """The plan of statement ``name`` over the package's migrations, and its marker names in order."""
    return compile_for(cql_schema.load(), name, cql)


def compile_for(schema: Schema, name: str, cql: str) -> tuple[Plan, tuple[str, ...]]:
    cursor = Cursor(cql, f"queries.cql statement {name}")
    if cursor.accept("select"):
        plan: Plan = _select(cursor, schema)
    elif cursor.accept("insert", "into"):
        plan = _insert(name, cursor, schema)
    elif cursor.accept("update"):
        plan = _update(name, cursor, schema)
    elif cursor.accept("delete"):
        plan = _delete(name, cursor, schema)
    else:
        cursor.refuse(f"the statement {cursor.peek()} (only SELECT, INSERT, UPDATE and DELETE)")
    if isinstance(plan, Modify) and plan.condition is not None and plan.timestamp is not None:
        cursor.refuse("USING TIMESTAMP in a conditional statement (Cassandra refuses it)")
    cursor.end()
    return plan, cursor.markers()


def _table(cursor: Cursor, schema: Schema) -> TableDef:
    name = cursor.name()
    if cursor.accept("."):
        cursor.refuse(f"a table of keyspace {name} ({name}.{cursor.name()})")
    if name not in schema:
        cursor.refuse(f"no table {name} in the migrations")
    return schema[name]


def _select(cursor: Cursor, schema: Schema) -> Plan:
    if cursor.is_word("*") or cursor.is_word("distinct") or cursor.is_word("json"):
        cursor.refuse(f"SELECT {cursor.peek()} (name the columns)")
    columns = cursor.listed(lambda: _selected(cursor))
    cursor.expect("from")
    if cursor.is_word("system", ".", "local"):
        cursor.expect("system", ".", "local")
        unknown = [c for c in columns if c not in _SYSTEM_LOCAL]
        if unknown or not cursor.at_end():
            cursor.refuse(f"system.local other than {sorted(_SYSTEM_LOCAL)} of its one row")
        return SystemLocal(tuple(columns))
    table = _table(cursor, schema)
    for column in columns:
        table.type_of(column, cursor)
    where = _where(cursor, table, full_key=False) if cursor.accept("where") else None
    for words in (("order", "by"), ("group", "by"), ("per", "partition"), ("allow", "filtering")):
        if cursor.is_word(*words):
            cursor.refuse(" ".join(words).upper())
    limit = _term(cursor, "LIMIT", _INT) if cursor.accept("limit") else None
    return Select(table, Output.of(table, columns), where, limit)


def _selected(cursor: Cursor) -> str:
    column = cursor.name()
    if cursor.is_word("("):
        cursor.refuse(f"the function call {column}(...)")
    if cursor.is_word("as"):
        cursor.refuse("AS (aliases)")
    return column


def _using(cursor: Cursor, *, ttl_allowed: bool = True) -> tuple[Term | None, Term | None]:
    """``USING TTL t AND TIMESTAMP ts``, either or both, in either order."""
    ttl = timestamp = None
    while True:
        if ttl is None and ttl_allowed and cursor.accept("ttl"):
            ttl = _term(cursor, "TTL", _INT)
        elif timestamp is None and cursor.accept("timestamp"):
            timestamp = _term(cursor, "TIMESTAMP", _BIGINT)
        else:
            cursor.refuse(f"USING {cursor.peek()}")
        if not cursor.accept("and"):
            return ttl, timestamp


def _insert(name: str, cursor: Cursor, schema: Schema) -> Plan:
    table = _table(cursor, schema)
    if cursor.is_word("json"):
        cursor.refuse("INSERT JSON")
    columns = cursor.names()
    cursor.expect("values")
    cursor.expect("(")
    terms = []
    for i, column in enumerate(columns):
        if i:
            cursor.expect(",")
        terms.append(_term(cursor, column, table.type_of(column, cursor)))
    cursor.expect(")")
    if len(set(columns)) != len(columns):
        cursor.refuse("a column named twice")
    given = dict(zip(columns, terms, strict=True))
    missing = [c for c in table.key if c not in given]
    if missing:
        cursor.refuse(f"an INSERT without the primary key column {missing[0]}")
    condition = NOT_EXISTS if cursor.accept("if", "not", "exists") else None
    ttl, timestamp = _using(cursor) if cursor.accept("using") else (None, None)
    key_t = table.table
    where = Where(table, tuple(given[c] for c in key_t.partition), tuple(given[c] for c in key_t.clustering))
    cells = tuple((c, t) for c, t in given.items() if c not in table.key)
    return Modify(name, table, where, cells, ttl, timestamp, insert=True, condition=condition)


def _update(name: str, cursor: Cursor, schema: Schema) -> Plan:
    table = _table(cursor, schema)
    ttl, timestamp = _using(cursor) if cursor.accept("using") else (None, None)
    cursor.expect("set")
    cells = cursor.listed(lambda: _assignment(cursor, table))
    if len({c for c, _ in cells}) != len(cells):
        cursor.refuse("a column set twice")
    cursor.expect("where")
    where = _where(cursor, table, full_key=True)
    condition = _condition(cursor, table)
    return Modify(name, table, where, tuple(cells), ttl, timestamp, condition=condition)


def _assignment(cursor: Cursor, table: TableDef) -> tuple[str, Term]:
    column = cursor.name()
    if column in table.key:
        cursor.refuse(f"SET of the primary key column {column}")
    if cursor.is_word("["):
        cursor.refuse(f"SET {column}[...] (an element of a collection)")
    cursor.expect("=")
    after = cursor.peek(1)
    if after is not None and after.text in ("+", "-"):
        cursor.refuse(f"SET {column} = ... {after} ... (collection or counter arithmetic)")
    return column, _term(cursor, column, table.type_of(column, cursor))


def _delete(name: str, cursor: Cursor, schema: Schema) -> Plan:
    columns = [] if cursor.is_word("from") else cursor.listed(cursor.name)
    cursor.expect("from")
    table = _table(cursor, schema)
    for column in columns:
        table.type_of(column, cursor)
        if column in table.key:
            cursor.refuse(f"DELETE of the primary key column {column}")
    ttl, timestamp = _using(cursor, ttl_allowed=False) if cursor.accept("using") else (None, None)
    cursor.expect("where")
    where = _where(cursor, table, full_key=True)
    condition = _condition(cursor, table)
    cells = tuple((c, Term(c, None)) for c in columns)  # a null: a tombstone cell
    return Modify(name, table, where, cells, ttl, timestamp, delete=not columns, condition=condition)


def _condition(cursor: Cursor, table: TableDef) -> str | tuple[tuple[str, Term], ...] | None:
    if not cursor.accept("if"):
        return None
    if cursor.accept("exists"):
        return EXISTS
    if cursor.is_word("not", "exists"):
        cursor.refuse("IF NOT EXISTS on an UPDATE or DELETE")
    return tuple(cursor.listed(lambda: _compare(cursor, table), "and"))


def _compare(cursor: Cursor, table: TableDef) -> tuple[str, Term]:
    column = cursor.name()
    if column in table.key:
        cursor.refuse(f"a condition on the primary key column {column}")
    op = cursor.next().text
    if op != "=":
        cursor.refuse(f"the condition {column} {op} ... (only =)")
    return column, _term(cursor, column, table.type_of(column, cursor))
