"""Webhook signing secrets (Standard Webhooks): ``whsec_`` + base64 of 32 random bytes.

Made here because both sides need one: the API at registration and rotation, a poller for a client
registered before secrets existed. Signing and verifying are in ``poller.signing`` and the SDK.
"""

from __future__ import annotations

import base64
import secrets

SECRET_PREFIX = "whsec_"


def new_signing_secret() -> str:
    """A fresh secret; its key (what HMAC uses) is the base64-decoded part after the prefix."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()
