"""One ``web.AppKey`` per shared resource; handlers read them from ``request.app``."""

from __future__ import annotations

import asyncio
from collections import defaultdict

from aiohttp import web

from schema.store import Store
from service.auth import Authenticator
from service.creates import CreateCombiner
from service.limits import RateLimiter
from service.metrics import ApiMetrics
from service.settings import ApiSettings
from service.targets import TargetGuard
from service.validation import RequestTypes

SETTINGS = web.AppKey("settings", ApiSettings)
STORE = web.AppKey("store", Store)
AUTH = web.AppKey("auth", Authenticator)
CREATES = web.AppKey("creates", CreateCombiner)
LIMITER = web.AppKey("limiter", RateLimiter)
TARGETS = web.AppKey("targets", TargetGuard)
METRICS = web.AppKey("metrics", ApiMetrics)
# The request body types with this app's limits in them (decoded by handlers, published by openapi).
TYPES = web.AppKey("types", RequestTypes)
# Admin changes to one client are serialised per replica: update_client overwrites the whole row.
ADMIN_LOCKS = web.AppKey("admin_locks", defaultdict[str, asyncio.Lock])
