"""``tickd_store_requests_total``: the store's requests by statement and kind, read when scraped.

The Cassandra bridge counts its requests in a plain ``Counter`` (``Bridge.request_counts``), so the hot
path does one dict increment and no Prometheus call; this collector turns the counts into a counter
family at scrape time. The poller node and the API register it on their own registries when they run on
Cassandra; on the in-memory store (``tickd dev``, the simulation) it is not registered.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

NAME = "tickd_store_requests_total"
HELP = (
    "Requests sent to Cassandra by statement (a queries.cql name, or batch:<names joined by +>, one per batch) "
    "and kind (lwt, read, write, batch); a paged read counts once per page"
)
LABELS = ("statement", "kind")

RequestCounts = Callable[[], Mapping[tuple[str, str], int]]


class StoreRequests(Collector):
    """A custom collector over ``counts`` (``CassandraStore.request_counts``), called once per scrape."""

    def __init__(self, counts: RequestCounts) -> None:
        self._counts = counts

    def describe(self) -> Iterator[Metric]:
        """The family without samples, so a registry can refuse a second collector of the same name."""
        yield CounterMetricFamily(NAME, HELP, labels=LABELS)

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(NAME, HELP, labels=LABELS)
        for (statement, kind), count in sorted(self._counts().items()):
            family.add_metric((statement, kind), count)
        yield family
