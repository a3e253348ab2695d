"""Tokens of the CQL subset tickd writes, and a cursor the parsers of ``cql_schema`` and ``cql`` read them
with. Anything the lexer does not know (a character, a positional ``?`` marker) is refused with
``UnsupportedCql``, never skipped."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn, TypeVar


class UnsupportedCql(ValueError):
    """CQL outside the subset the in-memory connection executes: said when a statement is prepared (or a
    migration read), naming the statement and the construct, so a new statement cannot run wrong."""


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # "name", "quoted", "marker", "string", "number", "op"
    text: str  # names lowercased (unquoted CQL names are case-insensitive), strings unescaped

    def __str__(self) -> str:
        return f":{self.text}" if self.kind == "marker" else repr(self.text) if self.kind == "string" else self.text


T = TypeVar("T")

_TOKEN = re.compile(
    r"""
    (?P<space>\s+|--[^\n]*|//[^\n]*|/\*.*?\*/)
    | (?P<string>'(?:[^']|'')*')
    | (?P<quoted>"(?:[^"]|"")*")
    | (?P<marker>:[A-Za-z_]\w*)
    | (?P<number>-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)
    | (?P<name>[A-Za-z_]\w*)
    | (?P<op><=|>=|!=|[=<>(),;.*{}:\[\]+-])
    | (?P<positional>\?)
    """,
    re.VERBOSE | re.DOTALL,
)


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    at = 0
    while at < len(text):
        match = _TOKEN.match(text, at)
        if match is None:
            raise UnsupportedCql(f"unexpected character {text[at]!r} at {text[at : at + 20]!r}")
        at = match.end()
        kind = match.lastgroup
        raw = match.group()
        if kind == "space":
            continue
        if kind == "positional":
            raise UnsupportedCql("positional ? markers (bind by :name)")
        if kind in ("string", "quoted"):
            raw = raw[1:-1].replace(raw[0] * 2, raw[0])  # inside, a doubled quote stands for one
        elif kind == "marker":
            raw = raw[1:]
        elif kind == "name":
            raw = raw.lower()
        tokens.append(Token(str(kind), raw))
    return tokens


class Cursor:
    """Reads tokens in order; ``expect`` and ``refuse`` raise ``UnsupportedCql`` naming ``where``."""

    def __init__(self, text: str, where: str) -> None:
        self.where = where
        try:
            self._tokens = tokenize(text)
        except UnsupportedCql as exc:
            raise UnsupportedCql(f"{where}: unsupported CQL: {exc}") from None
        self._at = 0

    def peek(self, ahead: int = 0) -> Token | None:
        at = self._at + ahead
        return self._tokens[at] if at < len(self._tokens) else None

    def at_end(self) -> bool:
        return self._at >= len(self._tokens) or (
            self._tokens[self._at].text == ";" and self._at + 1 == len(self._tokens)
        )

    def markers(self) -> tuple[str, ...]:
        """The names of the bind markers, each once, in order of first use."""
        return tuple(dict.fromkeys(token.text for token in self._tokens if token.kind == "marker"))

    def next(self) -> Token:
        token = self.peek()
        if token is None:
            self.refuse("an unexpected end of the statement")
        self._at += 1
        return token

    def is_word(self, *words: str) -> bool:
        """Whether the next tokens are these keywords (or symbols), without taking them."""
        for ahead, word in enumerate(words):
            token = self.peek(ahead)
            if token is None or token.kind not in ("name", "op") or token.text != word:
                return False
        return True

    def accept(self, *words: str) -> bool:
        """Take the keywords ``words`` if they come next."""
        if not self.is_word(*words):
            return False
        self._at += len(words)
        return True

    def expect(self, *words: str) -> None:
        if not self.accept(*words):
            found = self.peek()
            self.refuse(f"{' '.join(words).upper()} expected, found {found or 'the end'}")

    def name(self) -> str:
        """A table or column name (quoted names keep their case)."""
        token = self.next()
        if token.kind not in ("name", "quoted"):
            self.refuse(f"a name expected, found {token}")
        return token.text

    def names(self) -> list[str]:
        """``( name, name ... )``."""
        self.expect("(")
        found = self.listed(self.name)
        self.expect(")")
        return found

    def listed(self, read: Callable[[], T], separator: str = ",") -> list[T]:
        """``read`` once, then again after each ``separator``: ``a, b, c`` or ``x AND y``."""
        found = [read()]
        while self.accept(separator):
            found.append(read())
        return found

    def end(self) -> None:
        self.accept(";")
        if self.peek() is not None:
            self.refuse(f"{self.peek()} (and what follows it)")

    def refuse(self, construct: str) -> NoReturn:
        raise UnsupportedCql(f"{self.where}: unsupported CQL: {construct}")
