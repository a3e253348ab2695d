"""TICKD_EVENT_LOOP picks the event loop every entry point runs on; a wrong name stops it at start."""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from tickd.schema import eventloop
from tickd.schema.errors import ConfigError


async def _which() -> type[asyncio.AbstractEventLoop]:
    await asyncio.sleep(0.001)  # a timer runs on the chosen loop
    return type(asyncio.get_running_loop())


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, asyncio.BaseEventLoop), ("asyncio", asyncio.BaseEventLoop), (" UVLOOP ", uvloop.Loop)],
)
def test_the_loop_named_is_the_loop_run(value: str | None, expected: type) -> None:
    env = {} if value is None else {"TICKD_EVENT_LOOP": value}
    ran = eventloop.run(_which(), eventloop.loop_factory(env))
    assert issubclass(ran, expected)
    assert (ran is uvloop.Loop) == (expected is uvloop.Loop)


@pytest.mark.parametrize("value", ["trio", "uvloop2", "asyncio;rm"])
def test_an_unknown_loop_is_refused_naming_the_variable(value: str) -> None:
    with pytest.raises(ConfigError) as refused:
        eventloop.loop_factory({"TICKD_EVENT_LOOP": value})
    assert refused.value.field == "TICKD_EVENT_LOOP" and "asyncio, uvloop" in refused.value.message
