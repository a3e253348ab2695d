"""The Cassandra adapter of the store port: ``bridge`` (driver to asyncio, errors, paging) and one
module per aggregate, composed into ``CassandraStore``."""

from tickd.schema.cassandra.adapter import CassandraStore
from tickd.schema.cassandra.bridge import build_cluster, connect_refusal

__all__ = ["CassandraStore", "build_cluster", "connect_refusal"]
