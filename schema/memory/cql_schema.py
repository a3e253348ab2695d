"""The tables of ``schema/cql/0NN_*.cql``, read from the migrations themselves: each table's key (the
engine's ``Table``: partition and clustering columns, clustering order, default TTL) and its columns'
types, in the order Cassandra lists them (key columns as declared, then the others by name).

Understood: ``CREATE TABLE [IF NOT EXISTS]`` with an inline or separate ``PRIMARY KEY`` and ``WITH``
options (``CLUSTERING ORDER BY``, ``default_time_to_live``; storage options such as compaction are read
and ignored), and ``ALTER TABLE ... ADD [IF NOT EXISTS]`` of one column or a list. Anything else in a
migration is refused (``UnsupportedCql``), so a new kind of change cannot be silently skipped.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from tickd.schema import migrate, queries
from tickd.schema.memory.cql_lexer import Cursor, UnsupportedCql
from tickd.schema.memory.cql_types import CqlType, parse_type
from tickd.schema.memory.engine import Table


@dataclass(slots=True)
class TableDef:
    table: Table
    columns: dict[str, CqlType] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, ...]:
        return self.table.partition + self.table.clustering

    def ordered_columns(self) -> list[str]:
        """Every column as ``SELECT *`` lists them: the key as declared, then the others by name."""
        return [*self.key, *sorted(c for c in self.columns if c not in self.key)]

    def type_of(self, column: str, where: Cursor) -> CqlType:
        found = self.columns.get(column)
        if found is None:
            where.refuse(f"no column {column!r} in table {self.table.name}")
        return found


Schema = dict[str, TableDef]


@functools.cache
def load() -> Schema:
    """The tables after every migration of the package, in order (read once)."""
    schema: Schema = {}
    for _, file_name, text in queries.migrations():
        apply(schema, text, file_name)
    return schema


def apply(schema: Schema, text: str, where: str) -> None:
    """Apply one migration file's statements to ``schema``."""
    for number, statement in enumerate(migrate.statements(text), 1):
        cursor = Cursor(statement, f"{where} statement {number}")
        if cursor.accept("create", "table"):
            _create(schema, cursor)
        elif cursor.accept("alter", "table"):
            _alter(schema, cursor)
        else:
            cursor.refuse(f"{statement.split(None, 2)[:2]} (only CREATE TABLE and ALTER TABLE ... ADD)")


def _create(schema: Schema, cursor: Cursor) -> None:
    exists_ok = cursor.accept("if", "not", "exists")
    name = cursor.name()
    if name in schema:
        if exists_ok:
            return
        cursor.refuse(f"table {name} created twice")
    columns: dict[str, CqlType] = {}
    partition: list[str] = []
    clustering: list[str] = []
    cursor.expect("(")
    while True:
        if cursor.accept("primary", "key"):
            partition, clustering = _primary_key(cursor)
        else:
            column = cursor.name()
            columns[column] = parse_type(cursor)
            if cursor.accept("primary", "key"):
                partition = [column]
            if cursor.is_word("static"):
                cursor.refuse("static columns")
        if not cursor.accept(","):
            break
    cursor.expect(")")
    descending, ttl = _options(cursor, clustering)
    cursor.end()
    for column in (*partition, *clustering):
        if column not in columns:
            cursor.refuse(f"key column {column!r} not declared")
    if not partition:
        cursor.refuse(f"table {name} without a primary key")
    table = Table(name, tuple(partition), tuple(clustering), frozenset(descending), ttl)
    schema[name] = TableDef(table, columns)


def _primary_key(cursor: Cursor) -> tuple[list[str], list[str]]:
    cursor.expect("(")
    partition = cursor.names() if cursor.is_word("(") else [cursor.name()]
    clustering = []
    while cursor.accept(","):
        clustering.append(cursor.name())
    cursor.expect(")")
    return partition, clustering


def _options(cursor: Cursor, clustering: list[str]) -> tuple[set[str], int]:
    """``WITH`` options: the clustering order and the default TTL; storage options are skipped."""
    descending: set[str] = set()
    ttl = 0
    if not cursor.accept("with"):
        return descending, ttl
    while True:
        if cursor.accept("clustering", "order", "by"):
            descending = _clustering_order(cursor, clustering)
        else:
            option = cursor.name()
            cursor.expect("=")
            value = _option_value(cursor)
            if option == "default_time_to_live":
                ttl = int(value)
        if not cursor.accept("and"):
            return descending, ttl


def _clustering_order(cursor: Cursor, clustering: list[str]) -> set[str]:
    cursor.expect("(")
    descending = set()
    for position, expected in enumerate(clustering):
        column = cursor.name()
        if column != expected:
            cursor.refuse(f"CLUSTERING ORDER BY naming {column} at position {position} (not {expected})")
        if cursor.accept("desc"):
            descending.add(column)
        else:
            cursor.accept("asc")
        if position + 1 < len(clustering) and not cursor.accept(","):
            break
    cursor.expect(")")
    return descending


def _option_value(cursor: Cursor) -> str:
    """A number, a string, or a map literal (``{'class': ...}``), as text."""
    token = cursor.next()
    if token.text != "{":
        return token.text
    depth = 1
    while depth:
        text = cursor.next().text
        depth += {"{": 1, "}": -1}.get(text, 0)
    return "{...}"


def _alter(schema: Schema, cursor: Cursor) -> None:
    name = cursor.name()
    if name not in schema:
        cursor.refuse(f"ALTER TABLE of unknown table {name}")
    if not cursor.accept("add"):
        cursor.refuse("ALTER TABLE other than ADD")
    exists_ok = cursor.accept("if", "not", "exists")
    if cursor.accept("("):
        added = cursor.listed(lambda: (cursor.name(), parse_type(cursor)))
        cursor.expect(")")
    else:
        added = [(cursor.name(), parse_type(cursor))]
    cursor.end()
    columns = schema[name].columns
    for column, kind in added:
        if column in columns and not exists_ok:
            raise UnsupportedCql(f"{cursor.where}: column {column} of {name} added twice")
        columns.setdefault(column, kind)
