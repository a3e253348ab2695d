"""One ``web.AppKey`` per shared resource; handlers read them from ``request.app``."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable
from datetime import datetime

from aiohttp import web

from tickd.schema.store import Store
from tickd.service.auth import Authenticator
from tickd.service.creates import CreateCombiner
from tickd.service.limits import RateLimiter
from tickd.service.metrics import ApiMetrics
from tickd.service.serial import KeyedLocks
from tickd.service.settings import ApiSettings
from tickd.service.targets import TargetGuard
from tickd.service.validation import RequestTypes

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
# PUTs by business key are serialised per (client, key) on a replica: racing PUTs queue instead of
# colliding in the store's compare-and-set (where, under load, they could outlast the hot-write deadline).
KEY_LOCKS = web.AppKey("key_locks", KeyedLocks)
# The clock changes made outside a request read (service.actions, service.bulk), if not the wall clock's:
# the simulation runs bulk jobs on its virtual, skewed clock.
CLOCK: web.AppKey[Callable[[], datetime]] = web.AppKey("clock")
