"""Verify tickd's signed callbacks (the Standard Webhooks convention). Standard library only: copy this
file into a subscriber that does not install the SDK.

Each delivery carries ``webhook-id``, ``webhook-timestamp`` (Unix seconds) and ``webhook-signature``:
space-separated ``v1,<base64 HMAC-SHA256(key, f"{id}.{timestamp}.{body}")>``, one per secret tickd
signs with (two for a while after a rotation). The key is the base64 part of the client's
``whsec_...`` secret. Over HTTP these are headers; on Kafka, record headers (bytes: decode them).

    from tickd_client.webhooks import WebhookVerificationError, verify

    try:
        verify(SECRET, request.headers, raw_body)  # raw_body: the exact bytes received
    except WebhookVerificationError:
        return 401
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time
from collections.abc import Iterable, Mapping

__all__ = ["SECRET_PREFIX", "WebhookVerificationError", "sign", "verify"]

SECRET_PREFIX = "whsec_"
_HEADERS = ("webhook-id", "webhook-timestamp", "webhook-signature")


class WebhookVerificationError(ValueError):
    """The delivery is not authentic or not fresh: do not act on it."""


def _key(secret: str) -> bytes:
    try:
        return base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("the secret must be whsec_ followed by base64") from None


def sign(secret: str, msg_id: str, timestamp: int | str, body: bytes) -> str:
    """One signature, ``v1,<base64>``: what tickd sends for this secret."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(_key(secret), signed, hashlib.sha256).digest()).decode()


def _lowered(headers: Mapping[str, str] | Iterable[tuple[str, str | bytes]]) -> dict[str, str]:
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    return {name.lower(): value.decode() if isinstance(value, bytes) else value for name, value in pairs}


def _required(headers: dict[str, str]) -> tuple[str, str, str]:
    missing = [name for name in _HEADERS if not headers.get(name)]
    if missing:
        raise WebhookVerificationError(f"missing header(s): {', '.join(missing)}")
    return headers[_HEADERS[0]], headers[_HEADERS[1]], headers[_HEADERS[2]]


def _check_timestamp(value: str, tolerance_s: float, now: float | None) -> None:
    if not value.isascii() or not value.isdigit():
        raise WebhookVerificationError(f"webhook-timestamp is not integer Unix seconds: {value[:32]!r}")
    stamp = int(value)
    skew = (time.time() if now is None else now) - stamp
    if skew > tolerance_s:
        raise WebhookVerificationError(f"webhook-timestamp is {skew:.0f} s old (tolerance {tolerance_s} s)")
    if -skew > tolerance_s:
        raise WebhookVerificationError(f"webhook-timestamp is {-skew:.0f} s ahead (tolerance {tolerance_s} s)")


def verify(
    secret: str,
    headers: Mapping[str, str] | Iterable[tuple[str, str | bytes]],
    body: bytes,
    *,
    tolerance_s: float = 300,
    now: float | None = None,
) -> None:
    """Return if ``body`` was signed by tickd with ``secret`` within ``tolerance_s`` of ``now`` (Unix
    seconds; default the clock), either way; else raise ``WebhookVerificationError``.

    ``headers``: a mapping (header names in any case) or Kafka record headers (name, bytes) pairs.
    Signatures are compared in constant time; any one of them matching is enough.
    """
    msg_id, stamp, signatures = _required(_lowered(headers))
    _check_timestamp(stamp, tolerance_s, now)
    expected = sign(secret, msg_id, stamp, body).encode()
    for given in signatures.split(" "):
        if given.startswith("v1,") and hmac.compare_digest(expected, given.encode()):
            return
    raise WebhookVerificationError("no webhook-signature matches this secret and body")
