"""The SDK's subscriber-side verifier (``sdk/python/src/tickd_client/webhooks.py``), loaded from its file:
it is standard library only, and the SDK package itself is not installed in the server's environment."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_PATH = Path(__file__).resolve().parents[1] / "sdk" / "python" / "src" / "tickd_client" / "webhooks.py"
_spec = importlib.util.spec_from_file_location("tickd_client_webhooks", _PATH)
assert _spec is not None and _spec.loader is not None
webhooks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(webhooks)

verify = webhooks.verify
sign = webhooks.sign
WebhookVerificationError: type[ValueError] = webhooks.WebhookVerificationError
