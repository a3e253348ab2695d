"""Kafka dispatcher settings: the outage retry policy derived from the node's, and its env variables."""

from __future__ import annotations

import pytest

from tickd.poller.callbacks.backoff import RetryPolicy
from tickd.poller.callbacks.kafka import KafkaSettings
from tickd.schema.errors import ConfigError


def test_kafka_retry_policy_caps_waits_and_extends_budget() -> None:
    base = RetryPolicy(max_attempts=5, base_s=0.5, cap_s=60.0, inline_budget_s=5.0)
    policy = KafkaSettings(outage_retry_cap_s=2.0, outage_budget_s=30.0).retry_policy(base)
    assert (policy.cap_s, policy.inline_budget_s, policy.base_s, policy.max_attempts) == (2.0, 30.0, 0.5, 5)
    tiny = KafkaSettings(outage_retry_cap_s=0.1).retry_policy(base)
    assert tiny.base_s == 0.1  # base never above the cap (RetryPolicy would refuse it)


def test_kafka_outage_settings_from_env() -> None:
    env = {"TICKD_KAFKA_OUTAGE_RETRY_CAP_S": "0.5", "TICKD_KAFKA_OUTAGE_BUDGET_S": "90"}
    settings = KafkaSettings.from_env(env)
    assert (settings.outage_retry_cap_s, settings.outage_budget_s) == (0.5, 90.0)
    with pytest.raises(ConfigError, match="TICKD_KAFKA_OUTAGE_BUDGET_S"):
        KafkaSettings.from_env({"TICKD_KAFKA_OUTAGE_BUDGET_S": "-1"})
