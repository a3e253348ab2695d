"""Conditional changes: a schedule's version is its ETag, and ``If-Match`` makes a change conditional on it.

Every schedule answer carries ``version`` and ``ETag: "<version>"``. The version moves on with every
change to what the schedule will do next: a client's change (PATCH, PUT by key, pause, resume, cancel)
and the poller's own moves (a retry, a recurring schedule's next occurrence). A change sent with
``If-Match`` applies only to the version named (or, for ``*``, to any existing schedule); otherwise it
answers 412 ``precondition_failed`` with the current version, having changed nothing. The check and the
write are one compare-and-set: a change that lands between the read and the write also answers 412,
never a retry on the newer version (which is what a change without ``If-Match`` does).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

from aiohttp import web

from tickd.schema.changes import CONDITIONAL
from tickd.service import params
from tickd.service.errors import HttpError

HEADER = "If-Match"


class PreconditionFailed(HttpError):
    status = 412


class Versioned(Protocol):
    """A schedule, or a calendar: whatever carries the version its ETag names."""

    @property
    def version(self) -> int: ...


def etag(thing: Versioned) -> str:
    return f'"{thing.version}"'


@dataclass(frozen=True, slots=True)
class IfMatch:
    """The versions a change may apply to; ``versions`` None: any (``*``)."""

    versions: frozenset[int] | None

    def check(self, current: Versioned | None, what: str = "schedule") -> None:
        """412 unless ``current`` (a ``what``) exists and is at one of the versions."""
        if current is None:
            raise PreconditionFailed(f"there is no {what} to match If-Match", code="precondition_failed", field=HEADER)
        if self.versions is not None and current.version not in self.versions:
            wanted = ", ".join(f'"{v}"' for v in sorted(self.versions))
            raise PreconditionFailed(
                f"the {what} is at version {current.version} (ETag {etag(current)}), not {wanted}: "
                "it changed since you read it; read it again",
                code="precondition_failed",
                field=HEADER,
                headers={"ETag": etag(current)},
            )

    def changed_meanwhile(self, what: str = "schedule") -> PreconditionFailed:
        """What a change that lost its compare-and-set to another one answers."""
        return PreconditionFailed(
            f"the {what} changed while this request was applied; read it again",
            code="precondition_failed",
            field=HEADER,
        )


@contextmanager
def conditional(wanted: IfMatch | None) -> Iterator[None]:
    """While a change sent with If-Match runs: the store refuses, rather than takes over, another change of
    the schedule in flight (``schema.changes.CONDITIONAL``)."""
    token = CONDITIONAL.set(wanted is not None)
    try:
        yield
    finally:
        CONDITIONAL.reset(token)


def if_match(request: web.Request) -> IfMatch | None:
    """The request's ``If-Match``, or None without one (400 naming it when it is not ``*`` or ETags)."""
    given = params.headers(params.ChangeHeaders, request).if_match
    if not isinstance(given, str):
        return None
    if given.strip() == "*":
        return IfMatch(None)
    return IfMatch(frozenset(int(tag.strip().strip('"')) for tag in given.split(",")))
