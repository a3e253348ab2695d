"""The create request's ``traceparent`` (``Options.traceparent``, set when tracing is on) round-trips through
both sessions: written with the schedule, read back by the API's get and by the poller's minute read."""

from __future__ import annotations

from tests.contract.conftest import Env, Factory, read_all
from tickd.schema.model import Options
from tickd.schema.store import Store

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


async def test_traceparent_round_trips(env: Env, store: Store, new_schedule: Factory, client_id: str) -> None:
    one = new_schedule(env.later(3600), options=Options(traceparent=TRACEPARENT))
    jittered = new_schedule(env.later(3600), options=Options(jitter_ms=500, traceparent=TRACEPARENT))
    await store.create_schedule(one, env.now())
    await store.create_schedules([jittered], env.now())
    for s in (one, jittered):
        got = await store.get_schedule(client_id, s.schedule_id)
        assert got == s and got.options is not None and got.options.traceparent == TRACEPARENT
    read = await read_all(store, one.instance, one.location.minute)
    assert {r.schedule_id: r.options for r in read}[one.schedule_id] == one.options


async def test_options_without_traceparent_stay_as_they_were(env: Env, store: Store, new_schedule: Factory) -> None:
    s = new_schedule(env.later(3600), options=Options(jitter_ms=500))
    await store.create_schedule(s, env.now())
    assert await store.get_schedule(s.client_id, s.schedule_id) == s
