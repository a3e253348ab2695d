"""What one party may cost a replica: token buckets per key (client id, or source address) and bounded
least-recently-used maps to keep per-party state in.

Every bucket is in-process, so a limit is per API replica (N replicas behind a balancer allow up to N
times the rate). The buckets themselves are bounded (``max_keys``): a full bucket is the same as no
bucket, so full ones are dropped first; past that the least recently used is forgotten, which only
gives that party a fresh burst.
"""

from __future__ import annotations

import itertools
import math
import time
from collections import OrderedDict
from typing import Generic, TypeVar

from tickd.service.errors import Invalid, TooManyRequests
from tickd.service.settings import ApiSettings

# Buckets looked at per insert when the map is full.
_SCAN = 32
K = TypeVar("K")
V = TypeVar("V")


class Lru(Generic[K, V]):
    """A dict of at most ``bound`` entries; adding one more forgets the least recently used."""

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self._items: OrderedDict[K, V] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def get(self, key: K) -> V | None:
        """The value (now the most recently used), or None."""
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.bound:
            self._items.popitem(last=False)

    def pop(self, key: K) -> V | None:
        return self._items.pop(key, None)

    def oldest(self, count: int) -> list[tuple[K, V]]:
        """The ``count`` least recently used entries, oldest first."""
        return list(itertools.islice(self._items.items(), count))


class _Bucket:
    __slots__ = ("stamp", "tokens")

    def __init__(self, tokens: float, stamp: float) -> None:
        self.tokens = tokens
        self.stamp = stamp


class RateLimiter:
    """A token bucket per key: ``rate_per_s`` tokens a second, at most ``burst`` saved up.

    ``name`` and ``setting`` make the 429's message say which limit it was and how it is configured;
    ``code`` is the error code a client can branch on.
    """

    def __init__(
        self,
        rate_per_s: float,
        burst: int,
        *,
        name: str,
        setting: str,
        code: str,
        max_keys: int = 100_000,
    ) -> None:
        self.rate_per_s = rate_per_s
        self.burst = burst
        self.name = name
        self.setting = setting
        self.code = code
        self._buckets: Lru[str, _Bucket] = Lru(max_keys)

    def __len__(self) -> int:
        """The keys a bucket is kept for."""
        return len(self._buckets)

    def take(self, key: str, cost: int = 1, field: str | None = None) -> None:
        """Spend ``cost`` tokens or raise 429 with the wait in Retry-After. A cost over the burst can
        never be paid: 422 ``over_burst`` naming ``field`` (the request must be split)."""
        if cost > self.burst:
            raise Invalid(
                f"this request costs {cost} tokens of the {self.name}, more than its burst of {self.burst} "
                f"({self.setting}): split it into requests of at most {self.burst}",
                field=field,
                code="over_burst",
            )
        wait_s = self.wait_s(key, cost)
        if wait_s > 0:
            raise self.refusal(wait_s)
        self.spend(key, cost)

    def wait_s(self, key: str, cost: int = 1) -> float:
        """Seconds until ``key`` could spend ``cost`` tokens (0: now)."""
        bucket = self._refilled(key, time.monotonic())
        tokens = float(self.burst) if bucket is None else bucket.tokens
        return max(0.0, (cost - tokens) / self.rate_per_s)

    def spend(self, key: str, cost: int = 1) -> None:
        """Spend ``cost`` tokens whatever is left (never below zero): for costs known only afterwards."""
        now = time.monotonic()
        bucket = self._refilled(key, now)
        if bucket is None:
            bucket = _Bucket(float(self.burst), now)
            self._make_room()
            self._buckets.put(key, bucket)
        bucket.tokens = max(0.0, bucket.tokens - cost)

    def refund(self, key: str, cost: int = 1) -> None:
        """Give back tokens taken in advance for a cost that did not arise (never above the burst)."""
        bucket = self._refilled(key, time.monotonic())
        if bucket is not None:
            bucket.tokens = min(float(self.burst), bucket.tokens + cost)

    def refusal(self, wait_s: float) -> TooManyRequests:
        return TooManyRequests(
            f"{self.name} ({self.rate_per_s:g}/s, burst {self.burst}; {self.setting}) exceeded",
            code=self.code,
            headers={"Retry-After": str(max(1, math.ceil(wait_s)))},
        )

    def _refilled(self, key: str, now: float) -> _Bucket | None:
        bucket = self._buckets.get(key)
        if bucket is not None:
            bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.stamp) * self.rate_per_s)
            bucket.stamp = now
        return bucket

    def _make_room(self) -> None:
        """At the bound, drop the oldest buckets that have refilled (they are the same as none); a few
        at a time, so a flood of new keys costs each insert a bounded scan."""
        if len(self._buckets) < self._buckets.bound:
            return
        now = time.monotonic()
        for key, bucket in self._buckets.oldest(_SCAN):
            if bucket.tokens + (now - bucket.stamp) * self.rate_per_s >= self.burst:
                self._buckets.pop(key)


def create_limiter(settings: ApiSettings) -> RateLimiter:
    """Creates per client: a create, a PATCH or PUT by key, a trigger, each batch item (429 ``rate_limited``)."""
    return RateLimiter(
        settings.create_rate_per_s,
        settings.create_burst,
        name="create rate limit",
        setting="TICKD_CREATE_RATE_PER_S/TICKD_CREATE_BURST",
        code="rate_limited",
        max_keys=settings.rate_limit_keys_max,
    )


def read_limiter(settings: ApiSettings) -> RateLimiter:
    """Reads per client: every GET, and previews (429 ``read_rate_limited``)."""
    return RateLimiter(
        settings.read_rate_per_s,
        settings.read_burst,
        name="read rate limit",
        setting="TICKD_READ_RATE_PER_S/TICKD_READ_BURST",
        code="read_rate_limited",
        max_keys=settings.rate_limit_keys_max,
    )


def auth_failure_limiter(settings: ApiSettings) -> RateLimiter:
    """Failed authentications per source address (429 ``auth_rate_limited``)."""
    return RateLimiter(
        settings.auth_failure_rate_per_s,
        settings.auth_failure_burst,
        name="failed authentications from this address",
        setting="TICKD_AUTH_FAILURE_RATE_PER_S/TICKD_AUTH_FAILURE_BURST",
        code="auth_rate_limited",
        max_keys=settings.rate_limit_keys_max,
    )
