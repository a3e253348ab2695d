"""Per-client create rate limit: an in-process token bucket per client, so the limit is per API
replica (N replicas behind a balancer allow up to N times the rate)."""

from __future__ import annotations

import math
import time

from tickd.service.errors import TooManyRequests


class _Bucket:
    __slots__ = ("stamp", "tokens")

    def __init__(self, tokens: float, stamp: float) -> None:
        self.tokens = tokens
        self.stamp = stamp


class RateLimiter:
    def __init__(self, rate_per_s: float, burst: int) -> None:
        self.rate_per_s = rate_per_s
        self.burst = burst
        self._buckets: dict[str, _Bucket] = {}

    def take(self, client_id: str, cost: int = 1) -> None:
        """Spend ``cost`` tokens (capped at the burst) or raise 429 with the wait in Retry-After."""
        now = time.monotonic()
        bucket = self._buckets.get(client_id)
        if bucket is None:
            bucket = self._buckets[client_id] = _Bucket(float(self.burst), now)
        bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.stamp) * self.rate_per_s)
        bucket.stamp = now
        cost = min(cost, self.burst)
        if bucket.tokens < cost:
            wait_s = max(1, math.ceil((cost - bucket.tokens) / self.rate_per_s))
            raise TooManyRequests(
                f"create rate limit ({self.rate_per_s:g}/s, burst {self.burst}) exceeded",
                code="rate_limited",
                headers={"Retry-After": str(wait_s)},
            )
        bucket.tokens -= cost
