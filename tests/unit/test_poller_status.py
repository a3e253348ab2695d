"""The poller's status endpoints as a Kubernetes probe sees them: /healthz stays ok while the node is
fenced (an outage is waited out, never a restart), /readyz says 503 then."""

from __future__ import annotations

from aiohttp.test_utils import TestClient, TestServer

from tickd.poller.metrics import Metrics, status_app


async def test_readyz_follows_fencing_and_healthz_does_not() -> None:
    state: dict[str, object] = {"node_id": "n1", "fenced": False, "instances": {}}
    client = TestClient(TestServer(status_app(Metrics(), lambda: dict(state))))
    await client.start_server()
    try:
        assert (await client.get("/readyz")).status == 200
        state["fenced"] = True
        resp = await client.get("/readyz")
        assert resp.status == 503 and (await resp.json())["status"] == "fenced"
        assert (await client.get("/healthz")).status == 200
        state["fenced"] = False
        assert (await client.get("/readyz")).status == 200
        assert b"tickd_" in await (await client.get("/metrics")).read()
    finally:
        await client.close()


def test_reread_timings_must_cover_the_hot_write_deadline() -> None:
    """A write confirmed up to the deadline after its request may lose its hot mark to a newer one: the
    pollers must keep re-reading that long after a mark changes, and that far back."""
    from tickd.poller.settings import PollerSettings
    from tickd.schema.errors import ConfigError

    assert PollerSettings.from_env({}).mark_settle_s >= PollerSettings.from_env({}).store.hot_write_deadline_s
    try:
        PollerSettings.from_env({"TICKD_HOT_WRITE_DEADLINE_S": "5"})
    except ConfigError as exc:
        assert exc.field == "TICKD_MARK_SETTLE_S"
    else:
        raise AssertionError("a deadline beyond the settle time was accepted")
    settings = PollerSettings.from_env(
        {"TICKD_HOT_WRITE_DEADLINE_S": "5", "TICKD_MARK_SETTLE_S": "6", "TICKD_REREAD_LAG_S": "6"}
    )
    assert settings.store.hot_write_deadline_s == 5.0


async def test_a_plans_description_names_what_holds_its_rows_back() -> None:
    """/status's per-instance detail: rows waiting, how soon the first is due, and the two gates (the
    lease, changes read) that keep a due row from firing."""
    import uuid
    from datetime import UTC, datetime, timedelta

    from tickd.poller.plan import FiringPlan
    from tickd.schema.model import HttpCallback, Location, Schedule

    now = datetime(2030, 1, 1, 12, 0, 30, tzinfo=UTC)
    lease = {"held": False}
    plan = FiringPlan(0, lambda: now, lambda: lease["held"], see_ahead_s=1.0, recheck_s=0.5)
    minute = now.replace(second=0)
    state = plan.open_minute(minute, now, 1.0)
    plan.slice_read(plan.slice_reading(state, None, now))  # read whole
    for due_s in (-2.0, 5.0):
        due = now + timedelta(seconds=due_s)
        plan.consider(Schedule("c1", uuid.uuid4(), Location(0, due), due, b"{}", HttpCallback("http://x/"), now))
    described = plan.describe(now)
    assert described["pending"] == 2 and described["first_due_in_s"] == -2.0
    assert described["lease"] is False and described["changes_seen_age_s"] is None
    assert described["open_minutes"] == [minute.isoformat()]
    lease["held"] = True
    plan.marks_polled(now - timedelta(seconds=3))
    described = plan.describe(now)
    assert described["lease"] is True and described["changes_seen_age_s"] == 3.0
