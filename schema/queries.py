"""Loads ``cql/queries.cql``: every DML statement by name, with its flags."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

_NAME = re.compile(r"^-- name: (\w+)\s*$")
_FLAGS = re.compile(r"^-- flags: ([\w ,]+)$")
_PAGE = re.compile(r"^-- page: (\d+)\s*$")


@dataclass(frozen=True, slots=True)
class Query:
    name: str
    cql: str
    idempotent: bool
    page: int | None = None  # rows per page at most, below the store's page_size (``-- page: N``)


def parse(text: str) -> dict[str, Query]:
    """Split a queries file into named statements; a duplicate name is an error."""
    queries: dict[str, Query] = {}
    name: str | None = None
    flags: set[str] = set()
    page: int | None = None
    lines: list[str] = []

    def flush() -> None:
        if name is None:
            return
        if name in queries:
            raise ValueError(f"duplicate query name {name!r}")
        cql = " ".join(line.strip() for line in lines if line.strip()).rstrip(";")
        queries[name] = Query(name, cql, "idempotent" in flags, page)

    for line in text.splitlines():
        if match := _NAME.match(line):
            flush()
            name, flags, page, lines = match.group(1), set(), None, []
        elif name is not None and (match := _FLAGS.match(line)):
            flags = {f.strip() for f in match.group(1).replace(",", " ").split()}
        elif name is not None and (match := _PAGE.match(line)):
            page = int(match.group(1))
            if page < 1:
                raise ValueError(f"{name}: a page holds at least one row, not {page}")
        elif name is not None and not line.lstrip().startswith("--"):
            lines.append(line)
    flush()
    return queries


def load() -> dict[str, Query]:
    return parse(resources.files("tickd.schema").joinpath("cql/queries.cql").read_text())


def migrations() -> list[tuple[int, str, str]]:
    """``(version, file name, text)`` of every numbered ``cql/NNN_*.cql`` file, in order."""
    found = []
    for entry in resources.files("tickd.schema").joinpath("cql").iterdir():
        head = entry.name.split("_", 1)[0]
        if entry.name.endswith(".cql") and head.isdigit():
            found.append((int(head), entry.name, entry.read_text()))
    return sorted(found)
