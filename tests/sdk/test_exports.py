"""The package's top level: what a user imports is there, and ``verify_webhook`` is the webhooks verifier."""

from __future__ import annotations

import base64

import pytest
import tickd_client
from tickd_client import WebhookVerificationError, verify_webhook
from tickd_client.webhooks import sign


def test_everything_in_all_is_importable() -> None:
    assert all(hasattr(tickd_client, name) for name in tickd_client.__all__)


def test_verify_webhook_is_the_signature_check() -> None:
    secret = "whsec_" + base64.b64encode(b"k" * 32).decode()
    headers = {"webhook-id": "f", "webhook-timestamp": "1000", "webhook-signature": sign(secret, "f", 1000, b"{}")}
    verify_webhook(secret, headers, b"{}", now=1000)
    with pytest.raises(WebhookVerificationError):
        verify_webhook(secret, headers, b"{ }", now=1000)
