"""TICKD_STORE_BUDGET_S: a number of seconds in range, below TICKD_IDEMPOTENCY_TAKEOVER_S (a retry may
take over an Idempotency-Key only once the first request's writes are over); else the API does not start."""

from __future__ import annotations

import pytest

from tickd.schema.errors import ConfigError
from tickd.service.settings import ApiSettings


def test_the_default_and_an_override() -> None:
    assert ApiSettings.from_env({}).store_budget_s == 10.0
    assert ApiSettings.from_env({"TICKD_STORE_BUDGET_S": "2.5"}).store_budget_s == 2.5


@pytest.mark.parametrize("raw", ["", "ten", "nan", "inf", "-1", "0", "0.01", "601", "1e400", "1_0x"])
def test_a_bad_budget_names_the_variable(raw: str) -> None:
    with pytest.raises(ConfigError) as info:
        ApiSettings.from_env({"TICKD_STORE_BUDGET_S": raw})
    assert info.value.field == "TICKD_STORE_BUDGET_S"


def test_the_budget_must_end_before_an_idempotency_takeover() -> None:
    env = {"TICKD_STORE_BUDGET_S": "30", "TICKD_IDEMPOTENCY_TAKEOVER_S": "30"}
    with pytest.raises(ConfigError, match="below TICKD_IDEMPOTENCY_TAKEOVER_S") as info:
        ApiSettings.from_env(env)
    assert info.value.field == "TICKD_STORE_BUDGET_S"
    assert ApiSettings.from_env({**env, "TICKD_IDEMPOTENCY_TAKEOVER_S": "31"}).store_budget_s == 30
