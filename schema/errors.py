"""Every error tickd raises on purpose, in one place.

The API maps them to HTTP status codes in one middleware; pollers use ``retriable`` to decide whether
to try again. Lookups subclass ``LookupError`` so ``except LookupError`` reads naturally.
"""

from __future__ import annotations


class TickdError(Exception):
    """Base class. ``code`` is the stable machine-readable name shown to API clients."""

    code = "internal"
    retriable = False

    def __init__(self, message: str, *, field: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        if code is not None:  # a more precise name than the class's
            self.code = code


class InvalidInput(TickdError, ValueError):
    """A value from outside (body, header, query, setting) is not acceptable."""

    code = "invalid"


class NotFound(TickdError, LookupError):
    """The thing does not exist, or belongs to another client (the two are not told apart)."""

    code = "not_found"


class AlreadyExists(TickdError):
    code = "already_exists"


class Conflict(TickdError):
    """The request is valid but the current state forbids it (already fired, fire imminent, raced)."""

    code = "conflict"


class StoreUnavailable(TickdError):
    """Cassandra did not answer in time or refused; the operation may be retried."""

    code = "store_unavailable"
    retriable = True


class BatchNotLogged(StoreUnavailable):
    """A logged batch whose batchlog Cassandra could not write (a replica that is down but not yet known
    down, chosen to hold it): none of its writes were applied yet. They may be applied later, whole, by
    the node that did log it; the caller may send the same writes again without the batchlog
    (``schema.batchlog``)."""


class OutcomeUnknown(StoreUnavailable):
    """A lightweight transaction timed out (write type CAS): it may have applied or not. The next
    transaction on its partition finishes or drops it first (Paxos), so sending the same one again tells."""


class ConfigError(TickdError):
    """A TICKD_* setting is malformed; raised at start-up only."""

    code = "config"
