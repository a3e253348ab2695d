"""Pure parts of the dispatchers: HTTP status and error classification, the address guard, Kafka errors."""

from datetime import UTC, datetime

import aiohttp
import pytest
from aiohttp.client_reqrep import ConnectionKey
from aiokafka.errors import (
    KafkaConnectionError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    NotLeaderForPartitionError,
)

from tickd.poller.callbacks import guard
from tickd.poller.callbacks.http import HttpSettings, classify_error, classify_status
from tickd.poller.callbacks.kafka import KafkaSettings, classify_kafka_error, compression_type, producer_config
from tickd.schema.errors import ConfigError

NOW = datetime(2025, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("status", "ok", "retriable"),
    [
        (200, True, False),
        (201, True, False),
        (204, True, False),
        (301, False, False),
        (400, False, False),
        (401, False, False),
        (404, False, False),
        (408, False, True),
        (409, False, False),
        (425, False, True),
        (429, False, True),
        (500, False, True),
        (502, False, True),
        (503, False, True),
        (504, False, True),
    ],
)
def test_classify_status(status: int, ok: bool, retriable: bool) -> None:
    result = classify_status(status, None, 2, NOW)
    assert (result.ok, result.retriable, result.status_code, result.attempts) == (ok, retriable, status, 2)


def test_retry_after_is_read_only_when_retrying() -> None:
    assert classify_status(429, "7", 1, NOW).retry_after_s == 7.0
    assert classify_status(503, "Wed, 01 Jan 2025 00:00:09 GMT", 1, NOW).retry_after_s == 9.0
    assert classify_status(400, "7", 1, NOW).retry_after_s is None
    assert classify_status(503, "garbage", 1, NOW).retry_after_s is None


def test_classify_error() -> None:
    assert classify_error(TimeoutError(), 1, 2.5).retriable
    assert classify_error(TimeoutError(), 1, 2.5).error == "timeout after 2.5s"
    assert classify_error(aiohttp.ServerDisconnectedError(), 1, 1).retriable
    assert classify_error(ConnectionRefusedError(), 1, 1).retriable
    assert not classify_error(aiohttp.InvalidURL("nope"), 1, 1).retriable
    assert not classify_error(aiohttp.NonHttpUrlClientError("ftp://x"), 1, 1).retriable
    # What may have reached the subscriber: a timeout or a dropped connection; not a refused connection.
    assert classify_error(TimeoutError(), 1, 2.5).maybe_received
    assert classify_error(aiohttp.ServerDisconnectedError(), 1, 1).maybe_received
    key = ConnectionKey("x.test", 443, True, True, None, None, None)
    assert not classify_error(aiohttp.ClientConnectorError(key, OSError(111, "refused")), 1, 1).maybe_received


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("93.184.216.34", True),
        ("2606:2800:220:1:248:1893:25c8:1946", True),
        ("127.0.0.1", False),
        ("10.1.2.3", False),
        ("172.16.0.1", False),
        ("192.168.1.1", False),
        ("169.254.169.254", False),  # cloud metadata
        ("100.64.0.1", False),  # carrier-grade NAT
        ("0.0.0.0", False),
        ("224.0.0.1", False),
        ("::1", False),
        ("fe80::1%eth0", False),
        ("fd00::1", False),
        ("::ffff:127.0.0.1", False),  # IPv4-mapped loopback
        ("::ffff:93.184.216.34", True),
    ],
)
def test_is_public(address: str, public: bool) -> None:
    assert guard.is_public(address) is public


def test_literal_check_ignores_names() -> None:
    assert guard.literal_is_blocked("127.0.0.1")
    assert guard.literal_is_blocked("[::1]")
    assert not guard.literal_is_blocked("example.com")
    assert not guard.literal_is_blocked("93.184.216.34")


def test_http_settings_keep_one_client_below_the_shared_pools() -> None:
    with pytest.raises(ConfigError):
        HttpSettings(per_client_limit=300, per_host_limit=256)
    settings = HttpSettings.from_env({"TICKD_CALLBACK_ALLOW_PRIVATE": "true", "TICKD_CALLBACK_PER_CLIENT_LIMIT": "8"})
    assert settings.allow_private and settings.per_client_limit == 8


def test_kafka_errors() -> None:
    assert classify_kafka_error(KafkaConnectionError("down"), 1).retriable
    assert classify_kafka_error(KafkaTimeoutError(), 1).retriable
    assert classify_kafka_error(NotLeaderForPartitionError(), 1).retriable
    assert classify_kafka_error(TimeoutError(), 1).error == "timeout"
    assert classify_kafka_error(KafkaTimeoutError(), 1).maybe_received
    assert not classify_kafka_error(KafkaConnectionError("down"), 1).maybe_received
    assert not classify_kafka_error(MessageSizeTooLargeError(), 1).retriable


def test_producer_is_durable_and_compressed() -> None:
    config = producer_config(KafkaSettings())
    assert config["acks"] == "all" and config["enable_idempotence"] is True
    assert config["compression_type"] in {"lz4", "gzip"}
    assert compression_type("none") is None and compression_type("zstd") == "zstd"
    with pytest.raises(ConfigError):
        KafkaSettings(compression="brotli")
