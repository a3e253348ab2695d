"""Every operation of the blocking client against the real API (tickd-dev over the memory store)."""

from __future__ import annotations

import dataclasses
import time
import uuid
from datetime import UTC, date, datetime, timedelta
from typing import Any

import httpx
import pytest
from tickd_client import (
    NO_RETRY,
    Conflict,
    Debounce,
    Forbidden,
    HttpCallback,
    Invalid,
    MissedPolicy,
    NotFound,
    Pause,
    PreconditionFailed,
    RuleFields,
    Schedule,
    Tickd,
    Unauthorized,
    calls,
)
from tickd_client.models import decode

from tests.sdk.conftest import Dev, wait_for_dead_letters, wait_for_runs


def test_clients_create_list_get_resize_deactivate_rotate(dev: Dev) -> None:
    client_id = f"sdk-{uuid.uuid4().hex[:12]}"
    with Tickd(dev.url, admin_token=dev.admin_token) as admin:
        created = admin.create_client(client_id, 4, kafka_topics=["orders.*"])
        assert (created.client_id, created.poller_count, created.active) == (client_id, 4, True)
        assert created.api_key is not None and created.api_key.startswith(client_id + ".")
        assert client_id in [c.client_id for c in admin.list_clients()]
        assert admin.get_client(client_id).kafka_topics == ["orders.*"]
        resized = admin.resize_client(client_id, 2)
        assert (resized.poller_count, resized.poller_span) == (2, 4)
        assert admin.deactivate_client(client_id).active is False
        assert admin.activate_client(client_id).active is True
        assert admin.update_client(client_id, kafka_topics=[]).kafka_topics == []
        rotated = admin.rotate_key(client_id)
        signing = admin.rotate_signing_secret(client_id)
    assert created.signing_secret is not None and created.signing_secret.startswith("whsec_")
    assert signing.client_id == client_id and signing.signing_secret.startswith("whsec_")
    assert signing.signing_secret != created.signing_secret and signing.previous_valid_until is not None
    assert rotated.client_id == client_id and rotated.api_key != created.api_key
    with Tickd(dev.url, api_key=created.api_key) as old, pytest.raises(Unauthorized):
        old.list_policies()
    with Tickd(dev.url, api_key=rotated.api_key) as new:
        assert new.list_policies() == []


def test_schedules_create_get_update_cancel(tenant: Tickd, dev: Dev) -> None:
    fire_at = datetime.now(UTC) + timedelta(hours=1)
    created = tenant.create_schedule(
        fire_at=fire_at, callback=dev.healthz(), payload={"order": 1234}, idempotency_key="order-1234"
    )
    assert created.status == "scheduled" and created.payload == {"order": 1234}
    assert abs((created.fire_at - fire_at).total_seconds()) < 0.001
    again = tenant.create_schedule(
        fire_at=fire_at, callback=dev.healthz(), payload={"order": 1234}, idempotency_key="order-1234"
    )
    assert again.schedule_id == created.schedule_id
    assert tenant.get_schedule(created.schedule_id) == created
    moved = tenant.update_schedule(created.schedule_id, delay_s=600, payload={"order": 1235})
    assert moved.payload == {"order": 1235} and moved.fire_at < created.fire_at
    cancelled = tenant.cancel_schedule(created.schedule_id)
    assert cancelled.status == "cancelled"
    assert tenant.cancel_schedule(created.schedule_id).status == "cancelled"  # idempotent


def test_recurring_schedule_and_preview(tenant: Tickd, dev: Dev) -> None:
    created = tenant.create_schedule(cron="0 3 * * *", timezone="Europe/London", callback=dev.healthz())
    assert created.recurrence is not None and created.recurrence.cron == "0 3 * * *"
    assert created.occurrence == 1
    found = tenant.preview(cron="30 2 * * *", timezone="America/New_York", count=3, after="2026-03-07T00:00:00Z")
    assert [o.local.hour for o in found] == [2, 3, 2]  # 8 March 02:30 does not exist: shifted to 03:00
    assert all(o.timezone == "America/New_York" for o in found)


def test_batch_create_reports_each_item(tenant: Tickd, dev: Dev) -> None:
    results = tenant.create_schedules(
        [{"delay_s": 3600, "callback": dev.healthz()}, {"delay_s": 3600, "callback": {"type": "http", "url": "x"}}]
    )
    assert [r.index for r in results] == [0, 1]
    assert results[0].schedule_id is not None and results[0].error is None
    assert results[1].error is not None and results[1].error.field == "callback.url"


def test_list_schedules_pages_over_several_pages(tenant: Tickd, dev: Dev) -> None:
    ids = {tenant.create_schedule(delay_s=3600 + i, callback=dev.healthz()).schedule_id for i in range(5)}
    now = datetime.now(UTC)
    listed = list(tenant.list_schedules(now, now + timedelta(hours=2), page_size=2))
    assert {s.schedule_id for s in listed} == ids and len(listed) == 5
    assert [s.due_at for s in listed] == sorted(s.due_at for s in listed)
    assert list(tenant.list_schedules(now, now + timedelta(hours=2), status="cancelled")) == []


def test_runs_pages_newest_first(dev: Dev, recurring: str) -> None:
    requests: list[httpx.Request] = []
    http = httpx.Client(base_url=dev.url, event_hooks={"request": [requests.append]})
    with Tickd(dev.url, api_key=dev.api_key, http=http) as client:
        wait_for_runs(client, recurring, 3)
        requests.clear()
        runs = list(client.runs(recurring, page_size=1))
    assert len(runs) >= 3 and len(requests) >= 3
    assert [r.nominal_at for r in runs] == sorted((r.nominal_at for r in runs), reverse=True)
    assert len({r.fire_id for r in runs}) == len(runs)


def test_policies_put_get_list_delete(tenant: Tickd) -> None:
    created = tenant.put_policy("emails", max_in_flight=20, release_timeout_s=30)
    assert (created.name, created.max_in_flight, created.in_flight) == ("emails", 20, 0)
    assert tenant.put_policy("emails", max_in_flight=5, release_timeout_s=30).max_in_flight == 5
    assert tenant.get_policy("emails").in_flight == 0
    assert [p.name for p in tenant.list_policies()] == ["emails"]
    assert tenant.delete_policy("emails").name == "emails"
    with pytest.raises(NotFound) as missing:
        tenant.get_policy("emails")
    assert missing.value.field == "name"


def test_release_a_delivered_throttled_event(tenant: Tickd, dev: Dev) -> None:
    tenant.put_policy("one", max_in_flight=1, release_timeout_s=60)
    schedule = tenant.create_schedule(delay_s=0, callback=dev.healthz(), throttle="one")
    deadline = time.monotonic() + 20
    while tenant.get_policy("one").in_flight != 1:
        assert time.monotonic() < deadline, "the event was not delivered in 20 s"
        time.sleep(0.1)
    event_id = f"{schedule.fire_id}:0"
    assert tenant.release_event(event_id).released is True
    assert tenant.release_event(event_id).released is False
    assert tenant.get_policy("one").in_flight == 0
    with pytest.raises(NotFound) as unknown:
        tenant.release_event(f"{uuid.uuid4()}:1795461651836:0")
    assert unknown.value.field == "event_id"


def test_each_error_class_with_its_field(tenant: Tickd, dev: Dev) -> None:
    with pytest.raises(Invalid) as bad:
        tenant.create_schedule(delay_s=5, callback={"type": "http", "url": "ftp://example.com"})
    assert (bad.value.status, bad.value.field) == (400, "callback.url")
    with pytest.raises(Invalid) as refused:
        tenant.create_schedule(delay_s=5, fire_at=1, callback=dev.healthz())
    assert refused.value.status == 422 and refused.value.field == "fire_at"
    with pytest.raises(Invalid) as throttle:
        tenant.create_schedule(delay_s=5, callback=dev.healthz(), throttle="nope")
    assert throttle.value.field == "throttle"
    with pytest.raises(NotFound) as missing:
        tenant.get_schedule(str(uuid.uuid4()))
    assert missing.value.field == "schedule_id"
    with Tickd(dev.url, api_key="nobody.secret", retry=NO_RETRY) as stranger, pytest.raises(Unauthorized) as who:
        stranger.get_schedule(str(uuid.uuid4()))
    assert who.value.field == "Authorization"
    with Tickd(dev.url, admin_token=dev.api_key) as not_admin, pytest.raises(Forbidden):
        not_admin.list_clients()
    with Tickd(dev.url, admin_token=dev.admin_token) as admin, pytest.raises(Conflict) as taken:
        admin.create_client("dev", 2)
    assert (taken.value.code, taken.value.field) == ("already_exists", "client_id")


def test_naive_datetime_is_refused_before_sending(tenant: Tickd, dev: Dev) -> None:
    with pytest.raises(ValueError, match="timezone"):
        tenant.create_schedule(fire_at=datetime(2030, 1, 1), callback=HttpCallback(dev.url))  # noqa: DTZ001


def _wait_for_status(client: Tickd, schedule_id: str, status: str) -> None:
    deadline = time.monotonic() + 20
    while (found := client.get_schedule(schedule_id).status) != status:
        assert time.monotonic() < deadline, f"still {found}, not {status}, after 20 s"
        time.sleep(0.1)


def test_pause_and_resume_a_recurring_schedule(tenant: Tickd, dev: Dev) -> None:
    created = tenant.create_schedule(every="1s", callback=dev.healthz())
    wait_for_runs(tenant, created.schedule_id, 1)
    paused = tenant.pause_schedule(created.schedule_id)
    assert paused.schedule_id == created.schedule_id and paused.status == "paused"
    assert tenant.pause_schedule(created.schedule_id).status == "paused"  # idempotent
    assert tenant.get_schedule(created.schedule_id).status == "paused"
    now = datetime.now(UTC)
    listed = tenant.list_schedules(now - timedelta(hours=1), now + timedelta(hours=1), status="paused")
    assert [s.schedule_id for s in listed] == [created.schedule_id]
    paused_at = datetime.now(UTC)
    time.sleep(2.5)  # two occurrences fall while it is paused; neither fires (an earlier one may still land)
    fired = [r.nominal_at for r in tenant.runs(created.schedule_id) if r.status != "skipped"]
    assert fired and all(at <= paused_at for at in fired), (fired, paused_at)
    with pytest.raises(Conflict) as changing:
        tenant.update_schedule(created.schedule_id, payload=1)
    assert changing.value.code == "schedule_paused"
    resumed = tenant.resume_schedule(created.schedule_id)
    assert resumed.status == "scheduled" and resumed.fire_at > now
    assert any(r.status == "skipped" for r in tenant.runs(created.schedule_id))  # the missed occurrences
    with pytest.raises(Conflict) as twice:
        tenant.resume_schedule(created.schedule_id)
    assert twice.value.code == "not_paused"
    with pytest.raises(NotFound):
        tenant.pause_schedule(str(uuid.uuid4()))


def test_a_pause_until_a_time_with_a_note_resumes_by_itself(tenant: Tickd, dev: Dev) -> None:
    created = tenant.create_schedule(every="1h", callback=dev.healthz())
    assert created.pause is None
    until = datetime.now(UTC) + timedelta(seconds=4)
    paused = tenant.pause_schedule(created.schedule_id, until=until, note="warehouse migration")
    assert paused.status == "paused" and paused.pause is not None
    assert paused.pause.note == "warehouse migration" and paused.pause.paused_at <= datetime.now(UTC)
    assert paused.pause.until == until.replace(microsecond=until.microsecond // 1000 * 1000)  # the API keeps ms
    assert paused.due_at == paused.pause.until  # parked at the time it resumes
    assert tenant.get_schedule(created.schedule_id) == paused
    again = tenant.pause_schedule(created.schedule_id, until=until, note="warehouse migration")
    assert again == paused  # the same pause asked again changes nothing (a retry is safe)
    assert tenant.pause_schedule(created.schedule_id) == paused  # no body: left as it is
    later = int(time.time()) + 3
    replaced = tenant.pause_schedule(created.schedule_id, until=later)  # epoch seconds; no note now
    assert replaced.pause is not None and replaced.pause.note is None
    assert replaced.pause.until == datetime.fromtimestamp(later, UTC) == replaced.due_at
    assert replaced.version is not None and paused.version is not None and replaced.version > paused.version
    _wait_for_status(tenant, created.schedule_id, "scheduled")
    resumed = tenant.get_schedule(created.schedule_id)
    assert resumed.pause is None and resumed.fire_id == created.fire_id  # the hour had not come
    actions = [r.action for r in tenant.schedule_audit(created.schedule_id)]
    assert actions == ["schedule.resume_at_until", "schedule.pause", "schedule.pause", "schedule.create"], actions
    assert [n.kind for n in tenant.notices() if n.schedule_id == created.schedule_id] == ["schedule.resumed"]


def test_a_resume_clears_the_pause_and_a_note_alone_has_no_end(tenant: Tickd, dev: Dev) -> None:
    created = tenant.create_schedule(delay_s=3600, callback=dev.healthz())
    paused = tenant.pause_schedule(created.schedule_id, note="on hold")
    assert paused.pause is not None and (paused.pause.until, paused.pause.note) == (None, "on hold")
    assert paused.due_at == created.due_at  # no until: it stays where it is
    resumed = tenant.resume_schedule(created.schedule_id)
    assert resumed.status == "scheduled" and resumed.pause is None
    assert tenant.pause_schedule(created.schedule_id).pause is None  # a pause without a body shows none


def test_a_bad_pause_is_refused_naming_the_field(tenant: Tickd, dev: Dev) -> None:
    created = tenant.create_schedule(delay_s=3600, callback=dev.healthz())
    with pytest.raises(Invalid) as past:
        tenant.pause_schedule(created.schedule_id, until=datetime.now(UTC) - timedelta(minutes=1))
    assert (past.value.status, past.value.field) == (422, "until")
    with pytest.raises(Invalid) as far:
        tenant.pause_schedule(created.schedule_id, until=datetime.now(UTC) + timedelta(days=11 * 366))
    assert (far.value.status, far.value.field) == (422, "until")
    with pytest.raises(Invalid) as long:
        tenant.pause_schedule(created.schedule_id, note="x" * 501)
    assert long.value.field == "note"
    with pytest.raises(ValueError, match="timezone"):
        tenant.pause_schedule(created.schedule_id, until=datetime(2030, 1, 1))  # noqa: DTZ001
    assert tenant.get_schedule(created.schedule_id) == created  # none of them paused it


def test_the_pause_request_body_and_its_repeatability() -> None:
    plain = calls.pause_schedule("s")
    assert (plain.method, plain.path, plain.body, plain.repeatable) == ("POST", "/v1/schedules/s/pause", None, True)
    at = datetime(2030, 1, 1, 9, 30, tzinfo=UTC)
    timed = calls.pause_schedule("s", until=at, note="migration")
    assert timed.body == {"until": "2030-01-01T09:30:00+00:00", "note": "migration"} and timed.repeatable
    assert calls.pause_schedule("s", until=1893490200).body == {"until": 1893490200}
    assert calls.pause_schedule("s", note="").body == {"note": ""}  # given, so sent
    conditional = calls.pause_schedule("s", 4, until=at)
    assert conditional.repeatable is False and conditional.headers == {"If-Match": '"4"'}
    assert calls.pause_schedule("s", if_match=4).repeatable is False
    with pytest.raises(ValueError, match="timezone"):
        calls.pause_schedule("s", until=datetime(2030, 1, 1))  # noqa: DTZ001
    with pytest.raises(TypeError):
        calls.pause_schedule("s", until=True)


def test_a_schedule_answer_with_and_without_a_pause() -> None:
    answer: dict[str, Any] = {
        "schedule_id": "s",
        "status": "paused",
        "fire_at": "2030-01-01T09:00:00Z",
        "due_at": "2030-01-02T00:00:00Z",
        "fire_id": "s:1",
        "attempts": 0,
        "fired_at": None,
        "last_error": None,
        "created_at": "2029-12-01T00:00:00Z",
        "callback": {"type": "http", "url": "http://example.com/"},
    }
    pause = {"paused_at": "2029-12-31T08:00:00.250Z", "until": "2030-01-02T00:00:00Z", "note": "freeze"}
    found = decode(Schedule, {**answer, "pause": pause})
    assert found.pause == Pause(
        datetime(2029, 12, 31, 8, 0, 0, 250000, tzinfo=UTC), datetime(2030, 1, 2, tzinfo=UTC), "freeze"
    )
    assert decode(Schedule, {**answer, "pause": {"paused_at": pause["paused_at"]}}).pause == Pause(
        datetime(2029, 12, 31, 8, 0, 0, 250000, tzinfo=UTC)
    )
    assert decode(Schedule, answer).pause is None and decode(Schedule, {**answer, "pause": None}).pause is None
    with pytest.raises(ValueError, match=r"Schedule\.pause: missing paused_at"):
        decode(Schedule, {**answer, "pause": {"note": "x"}})


def test_trigger_fires_once_now_with_its_own_fire_id(tenant: Tickd, dev: Dev) -> None:
    parent = tenant.create_schedule(delay_s=3600, callback=dev.healthz(), payload={"p": 1})
    trigger = tenant.trigger_schedule(parent.schedule_id)
    assert trigger.trigger_of == parent.schedule_id and trigger.schedule_id != parent.schedule_id
    assert trigger.fire_id.startswith(f"{parent.schedule_id}:") and trigger.fire_id != parent.fire_id
    assert trigger.payload == {"p": 1} and trigger.fire_at < parent.fire_at
    _wait_for_status(tenant, trigger.schedule_id, "succeeded")
    assert tenant.get_schedule(parent.schedule_id) == parent  # its own timeline is untouched
    keyed = tenant.trigger_schedule(parent.schedule_id, idempotency_key="once")
    assert tenant.trigger_schedule(parent.schedule_id, idempotency_key="once").schedule_id == keyed.schedule_id
    assert keyed.schedule_id != trigger.schedule_id
    tenant.cancel_schedule(parent.schedule_id)
    with pytest.raises(Conflict) as cancelled:
        tenant.trigger_schedule(parent.schedule_id)
    assert cancelled.value.code == "already_cancelled"


def test_put_get_cancel_by_business_key(tenant: Tickd, dev: Dev) -> None:
    key = "order-1234@eu:reminder"
    fire_at = datetime.now(UTC) + timedelta(hours=1)
    first = tenant.put_schedule_by_key(key, fire_at=fire_at, callback=dev.healthz(), payload={"v": 1})
    second = tenant.put_schedule_by_key(key, fire_at=fire_at, callback=dev.healthz(), payload={"v": 2})
    assert second.schedule_id == first.schedule_id and second.payload == {"v": 2}
    assert second.fire_id == first.fire_id  # the same fire time: the same fire
    moved = tenant.put_schedule_by_key(key, delay_s=7200, callback=dev.healthz(), payload={"v": 3})
    assert moved.schedule_id == first.schedule_id and moved.fire_at > fire_at and moved.fire_id != first.fire_id
    assert tenant.get_schedule_by_key(key) == moved
    assert tenant.get_schedule(first.schedule_id) == moved
    assert tenant.cancel_schedule_by_key(key).status == "cancelled"
    assert tenant.cancel_schedule_by_key(key).status == "cancelled"  # idempotent
    renewed = tenant.put_schedule_by_key(key, delay_s=60, callback=dev.healthz())
    assert renewed.schedule_id != first.schedule_id and renewed.status == "scheduled"
    assert tenant.get_schedule_by_key(key).schedule_id == renewed.schedule_id
    with pytest.raises(NotFound) as missing:
        tenant.get_schedule_by_key("no-such-key")
    assert missing.value.field == "key"
    with pytest.raises(Invalid) as bad:
        tenant.put_schedule_by_key("not a key", delay_s=60, callback=dev.healthz())
    assert (bad.value.status, bad.value.field) == (400, "key")


def test_a_debounced_put_by_key_pushes_its_fire_back_within_max_wait(tenant: Tickd, dev: Dev) -> None:
    key = "doc-42"
    first = tenant.put_schedule_by_key(key, debounce={"window_s": 60, "max_wait_s": 600}, callback=dev.healthz())
    assert first.debounce is not None and first.debounce.first_put_at is not None
    assert first.debounce == Debounce(60.0, "trailing", 600.0, first.debounce.first_put_at, first.debounce.first_put_at)
    assert first.fire_at == first.debounce.first_put_at + timedelta(seconds=60)
    time.sleep(0.05)  # the next PUT a few milliseconds later (the API keeps milliseconds)
    second = tenant.put_schedule_by_key(
        key, debounce={"window_s": 60, "max_wait_s": 600}, callback=dev.healthz(), payload={"draft": 2}
    )
    assert second.schedule_id == first.schedule_id and second.payload == {"draft": 2}
    assert second.debounce is not None and second.debounce.last_put_at is not None
    assert second.debounce.first_put_at == first.debounce.first_put_at  # the same burst
    assert second.debounce.last_put_at > first.debounce.first_put_at
    assert second.fire_at == second.debounce.last_put_at + timedelta(seconds=60) > first.fire_at  # pushed back
    assert tenant.get_schedule_by_key(key) == second
    # A debounce as read back is PUT again as given: window, cap and edge, not its PUT times.
    third = tenant.put_schedule_by_key(key, debounce=second.debounce, callback=dev.healthz(), payload={"draft": 3})
    assert third.debounce is not None and third.debounce.first_put_at == first.debounce.first_put_at
    assert (third.debounce.window_s, third.debounce.max_wait_s, third.debounce.edge) == (60.0, 600.0, "trailing")
    assert third.fire_at > second.fire_at and third.payload == {"draft": 3}
    # max_wait_s caps how far the burst's fire is pushed: never later than that after its first PUT.
    capped = tenant.put_schedule_by_key("doc-43", debounce={"window_s": 60, "max_wait_s": 60}, callback=dev.healthz())
    assert capped.debounce is not None and capped.debounce.first_put_at is not None
    time.sleep(0.05)
    again = tenant.put_schedule_by_key("doc-43", debounce={"window_s": 60, "max_wait_s": 60}, callback=dev.healthz())
    assert again.debounce is not None and again.debounce.last_put_at is not None
    assert again.debounce.last_put_at > capped.debounce.first_put_at
    assert capped.fire_at == capped.debounce.first_put_at + timedelta(seconds=60)
    # Past the cap a PUT moves it by a millisecond only (no two versions share a fire time).
    assert again.fire_at == capped.fire_at + timedelta(milliseconds=1)
    plain = tenant.put_schedule_by_key("doc-44", delay_s=3600, callback=dev.healthz())
    assert plain.debounce is None


def test_a_leading_debounce_fires_the_first_put_at_once(tenant: Tickd, dev: Dev) -> None:
    first = tenant.put_schedule_by_key("doc-1", debounce={"window_s": 60, "edge": "leading"}, callback=dev.healthz())
    assert first.debounce is not None and first.debounce.edge == "leading" and first.debounce.max_wait_s is None
    assert first.fire_at == first.debounce.first_put_at  # at once
    _wait_for_status(tenant, first.schedule_id, "succeeded")
    # A PUT within the window after the leading fire went out: the burst's trailing fire, a new schedule.
    rest = tenant.put_schedule_by_key("doc-1", debounce={"window_s": 60, "edge": "leading"}, callback=dev.healthz())
    assert rest.schedule_id != first.schedule_id and rest.status == "scheduled"
    assert rest.debounce is not None and rest.debounce.last_put_at is not None
    assert rest.fire_at == rest.debounce.last_put_at + timedelta(seconds=60)


def test_a_bad_debounce_is_invalid_naming_the_field(tenant: Tickd, dev: Dev) -> None:
    with pytest.raises(Invalid) as timed:
        tenant.put_schedule_by_key("doc-9", debounce={"window_s": 5}, delay_s=5, callback=dev.healthz())
    assert (timed.value.status, timed.value.field) == (422, "delay_s")
    with pytest.raises(Invalid) as recurring:
        tenant.put_schedule_by_key("doc-9", debounce={"window_s": 5}, every="1h", callback=dev.healthz())
    assert (recurring.value.status, recurring.value.field) == (422, "every")
    with pytest.raises(Invalid) as short:
        tenant.put_schedule_by_key("doc-9", debounce={"window_s": 10, "max_wait_s": 5}, callback=dev.healthz())
    assert (short.value.status, short.value.field) == (422, "debounce.max_wait_s")
    with pytest.raises(Invalid) as small:
        tenant.put_schedule_by_key("doc-9", debounce={"window_s": 0.5}, callback=dev.healthz())
    assert small.value.field == "debounce.window_s"
    only_by_key: Any = {"debounce": {"window_s": 5}}  # not in ScheduleFields: a create takes none
    with pytest.raises(Invalid) as created:
        tenant.create_schedule(callback=dev.healthz(), **only_by_key)
    assert (created.value.status, created.value.field) == (400, "debounce")
    with pytest.raises(NotFound):
        tenant.get_schedule_by_key("doc-9")  # none of them wrote anything


def test_a_debounced_put_body_and_its_repeatability() -> None:
    callback = {"type": "http", "url": "http://example.com/"}
    given = calls.put_schedule_by_key("k", {"callback": callback, "debounce": {"window_s": 5, "edge": "leading"}})
    assert given.body == {"callback": callback, "debounce": {"window_s": 5, "edge": "leading"}}
    assert given.repeatable is False  # a repeat is one more PUT of the burst: it pushes the fire back again
    assert calls.put_schedule_by_key("k", {"callback": callback, "fire_at": 1893490200}).repeatable is True
    read = Debounce(5.0, "trailing", 60.0, datetime(2030, 1, 1, tzinfo=UTC), datetime(2030, 1, 1, tzinfo=UTC))
    again = calls.put_schedule_by_key("k", {"callback": callback, "debounce": read})
    assert again.body["debounce"] == {"window_s": 5.0, "max_wait_s": 60.0, "edge": "trailing"}
    assert again.repeatable is False
    uncapped = calls.put_schedule_by_key("k", {"callback": callback, "debounce": Debounce(5.0, "leading")})
    assert uncapped.body["debounce"] == {"window_s": 5.0, "edge": "leading"}  # no cap: none sent


def test_a_schedule_answer_with_and_without_a_debounce() -> None:
    answer: dict[str, Any] = {
        "schedule_id": "s",
        "status": "scheduled",
        "fire_at": "2030-01-01T09:00:05.250Z",
        "due_at": "2030-01-01T09:00:05.250Z",
        "fire_id": "s:1",
        "attempts": 0,
        "fired_at": None,
        "last_error": None,
        "created_at": "2030-01-01T08:59:00Z",
        "callback": {"type": "http", "url": "http://example.com/"},
    }
    debounce = {
        "window_s": 5,  # an integral float may come as an int: read as a float
        "edge": "trailing",
        "max_wait_s": 60.0,
        "first_put_at": "2030-01-01T08:59:00Z",
        "last_put_at": "2030-01-01T09:00:00.250Z",
    }
    found = decode(Schedule, {**answer, "debounce": debounce})
    assert found.debounce == Debounce(
        5.0,
        "trailing",
        60.0,
        datetime(2030, 1, 1, 8, 59, tzinfo=UTC),
        datetime(2030, 1, 1, 9, 0, 0, 250000, tzinfo=UTC),
    )
    assert found.debounce is not None and isinstance(found.debounce.window_s, float)
    uncapped = decode(Schedule, {**answer, "debounce": {"window_s": 2.5, "edge": "leading"}}).debounce
    assert uncapped == Debounce(2.5, "leading", None, None, None)
    assert decode(Schedule, answer).debounce is None and decode(Schedule, {**answer, "debounce": None}).debounce is None
    with pytest.raises(ValueError, match=r"Schedule\.debounce: missing window_s"):
        decode(Schedule, {**answer, "debounce": {"edge": "trailing"}})
    with pytest.raises(ValueError, match=r"Schedule\.debounce\.first_put_at"):
        decode(Schedule, {**answer, "debounce": {**debounce, "first_put_at": "soon"}})


def test_dead_letters_list_get_redrive(tenant: Tickd, dev: Dev) -> None:
    before = datetime.now(UTC) - timedelta(seconds=1)
    one = tenant.create_schedule(delay_s=0, callback=dev.refusing(), payload={"n": 1})
    two = tenant.create_schedule(delay_s=0, callback=dev.refusing(), payload={"n": 2})
    (letter,) = wait_for_dead_letters(tenant, one.schedule_id)
    wait_for_dead_letters(tenant, two.schedule_id)
    # A listing shows no payload (the API reads none for a list); GET of one dead letter does.
    assert (letter.schedule_id, letter.fire_id, letter.payload) == (one.schedule_id, one.fire_id, None)
    assert letter.attempts == 1 and letter.last_error == "HTTP 404" and letter.redriven_at is None
    assert letter.dead_letter_id.endswith(f"-{one.schedule_id}")
    assert tenant.get_dead_letter(letter.dead_letter_id) == dataclasses.replace(letter, payload={"n": 1})
    both = list(tenant.list_dead_letters(page_size=1))
    assert {d.schedule_id for d in both} == {one.schedule_id, two.schedule_id} and len(both) == 2
    assert [d.failed_at for d in both] == sorted((d.failed_at for d in both), reverse=True)
    assert len(list(tenant.list_dead_letters(before, datetime.now(UTC) + timedelta(seconds=1)))) == 2
    assert list(tenant.list_dead_letters(end=before)) == []
    later = datetime.now(UTC) + timedelta(minutes=1)
    assert list(tenant.list_dead_letters(later, later + timedelta(hours=1))) == []

    due = (datetime.now(UTC) + timedelta(hours=1)).replace(microsecond=0)
    redriven = tenant.redrive_dead_letter(letter.dead_letter_id, at=due)
    assert redriven.redriven_at is not None and redriven.redriven_due_at == due
    again = tenant.redrive_dead_letter(letter.dead_letter_id)  # once only: the first redrive's marks
    assert again == redriven
    assert tenant.get_dead_letter(letter.dead_letter_id) == redriven
    moved = tenant.get_schedule(one.schedule_id)
    assert (moved.status, moved.due_at, moved.fire_id) == ("scheduled", due, one.fire_id)

    done = tenant.redrive_dead_letters(schedule_id=two.schedule_id, at=due)
    assert [d.schedule_id for d in done.redriven] == [two.schedule_id] and done.errors == []
    assert done.redriven[0].redriven_due_at == due
    assert tenant.redrive_dead_letters(schedule_id=two.schedule_id, at=due).redriven == []  # none left
    assert tenant.redrive_dead_letters(before).redriven == []  # both were redriven already
    with pytest.raises(NotFound):
        tenant.get_dead_letter(f"1795474750375-{uuid.uuid4()}")
    with pytest.raises(NotFound):
        tenant.redrive_dead_letter(f"1795474750375-{uuid.uuid4()}")


def test_cluster_view(dev: Dev) -> None:
    with Tickd(dev.url, admin_token=dev.admin_token) as admin:
        cluster = admin.cluster()
    (node,) = cluster.nodes
    assert node.heartbeat_age_s < 10 and node.heartbeat_at <= cluster.at
    held = {(i.client_id, i.poller_id) for i in node.instances}
    assert {("dev", 0), ("dev", 1)} <= held
    assert all(i.owner == node.node_id and i.epoch >= 1 for i in node.instances)
    with Tickd(dev.url, admin_token=dev.api_key) as not_admin, pytest.raises(Forbidden):
        not_admin.cluster()


def test_stats_count_a_delivered_and_a_failed_fire(tenant: Tickd, dev: Dev) -> None:
    before = tenant.stats()
    assert [w.window_s for w in before.windows] == [300, 3600, 86400]
    assert before.window(300).fired == 0 and before.window(300).lateness_p50_s is None  # a fresh client
    tenant.create_schedule(delay_s=0, callback=dev.healthz())
    tenant.create_schedule(delay_s=0, callback=dev.refusing())
    deadline = time.monotonic() + 30
    while (counted := tenant.stats().window(300)).fired < 2 or counted.delivered + counted.failed < 2:
        assert time.monotonic() < deadline, f"the two fires are not in the stats after 30 s: {counted}"
        time.sleep(0.2)
    assert (counted.fired, counted.delivered, counted.retried, counted.failed) == (2, 1, 0, 1)
    p50, p99, lateness_max = counted.lateness_p50_s, counted.lateness_p99_s, counted.lateness_max_s
    assert p50 is not None and p99 is not None and lateness_max is not None
    assert 0 <= p50 <= p99 <= lateness_max  # bucket edges, never above the max
    now = tenant.stats()
    assert now.client_id == before.client_id and now.at.tzinfo is not None
    assert all(w.fired == 2 for w in now.windows)  # the hour and the day hold the 5 minutes


def test_admin_stats_for_the_cluster_and_for_one_client(tenant: Tickd, dev: Dev) -> None:
    client_id = tenant.stats().client_id
    assert client_id is not None
    with Tickd(dev.url, admin_token=dev.admin_token) as admin:
        before = admin.admin_stats()
        assert before.client_id is None and [w.window_s for w in before.windows] == [300, 3600, 86400]
        fresh = admin.admin_stats(client_id)
        assert fresh.client_id == client_id and fresh.window(300).fired == 0
        tenant.create_schedule(delay_s=0, callback=dev.healthz())
        tenant.create_schedule(delay_s=0, callback=dev.refusing())
        deadline = time.monotonic() + 30
        while (one := admin.admin_stats(client_id).window(300)).delivered + one.failed < 2:
            assert time.monotonic() < deadline, f"the two fires are not in the client's stats after 30 s: {one}"
            time.sleep(0.2)
        assert (one.fired, one.delivered, one.retried, one.failed) == (2, 1, 0, 1)
        assert one == tenant.stats().window(300)  # the admin's view of a client is the client's own
        cluster = admin.admin_stats()
        every = cluster.window(300)
        assert cluster.client_id is None and cluster.at.tzinfo is not None
        assert every.fired >= before.window(300).fired + 2 and every.delivered >= 1 and every.failed >= 1
        assert every.lateness_max_s is not None
        with pytest.raises(Invalid) as bad:
            admin.admin_stats("Not A Name")
        assert bad.value.field == "client_id"
    with Tickd(dev.url, admin_token=dev.api_key) as not_admin, pytest.raises(Forbidden):
        not_admin.admin_stats()


def test_if_match_changes_only_the_version_read(tenant: Tickd, dev: Dev) -> None:
    made = tenant.create_schedule(delay_s=3600, callback=dev.healthz(), payload={"v": 1})
    assert made.version is not None and tenant.get_schedule(made.schedule_id).version == made.version
    changed = tenant.update_schedule(made.schedule_id, payload={"v": 2}, if_match=made.version)
    assert changed.version is not None and changed.version > made.version
    with pytest.raises(PreconditionFailed) as stale:
        tenant.update_schedule(made.schedule_id, payload={"v": 3}, if_match=made.version)
    assert stale.value.status == 412 and stale.value.field == "If-Match"
    with pytest.raises(PreconditionFailed):
        tenant.pause_schedule(made.schedule_id, if_match=made.version)
    assert tenant.get_schedule(made.schedule_id).payload == {"v": 2}  # neither applied
    paused = tenant.pause_schedule(made.schedule_id, if_match="*")
    resumed = tenant.resume_schedule(made.schedule_id, if_match=paused.version)
    cancelled = tenant.cancel_schedule(made.schedule_id, if_match=f'"{resumed.version}"')
    assert cancelled.status == "cancelled" and tenant.cancel_schedule(made.schedule_id, if_match=cancelled.version)
    key = f"sdk-{uuid.uuid4().hex[:8]}"
    with pytest.raises(PreconditionFailed):  # a key with no schedule has no version to match
        tenant.put_schedule_by_key(key, delay_s=3600, callback=dev.healthz(), if_match="*")
    first = tenant.put_schedule_by_key(key, delay_s=3600, callback=dev.healthz())
    second = tenant.put_schedule_by_key(key, delay_s=3600, callback=dev.healthz(), payload=2, if_match=first.version)
    with pytest.raises(PreconditionFailed):
        tenant.cancel_schedule_by_key(key, if_match=first.version)
    assert tenant.cancel_schedule_by_key(key, if_match=second.version).status == "cancelled"


def test_audit_trail_of_the_client_and_of_a_schedule(tenant: Tickd, dev: Dev) -> None:
    made = tenant.create_schedule(delay_s=3600, callback=dev.healthz(), payload={"v": 1})
    changed = tenant.update_schedule(made.schedule_id, payload={"v": 2})
    tenant.cancel_schedule(made.schedule_id)
    records = list(tenant.schedule_audit(made.schedule_id, page_size=1))
    assert [r.action for r in records] == ["schedule.cancel", "schedule.update", "schedule.create"]
    assert records[1].version == changed.version and records[1].changes["payload"]["bytes"] == 7
    assert records[0].actor.startswith("key:") and all(r.schedule_id == made.schedule_id for r in records)
    mine = [r.audit_id for r in tenant.audit() if r.schedule_id == made.schedule_id]
    assert mine == [r.audit_id for r in records]


def test_a_schedule_failing_twice_in_a_row_is_auto_paused_and_the_feed_says_so(tenant: Tickd, dev: Dev) -> None:
    """End to end on tickd-dev: every second, a callback refused for good, pause_after_failures=2."""
    assert tenant.get_settings().pause_after_failures == 0
    created = tenant.create_schedule(every="1s", callback=dev.refusing(), pause_after_failures=2)
    assert created.pause_after_failures == 2
    _wait_for_status(tenant, created.schedule_id, "paused")
    runs = [r.status for r in tenant.runs(created.schedule_id)]
    assert runs[:2] == ["failed", "failed"], runs
    kinds = [n.kind for n in tenant.notices() if n.schedule_id == created.schedule_id]
    assert kinds.count("schedule.auto_paused") == 1, kinds  # a fire already out may still end after it
    assert kinds.count("fire.dead_lettered") >= 2, kinds
    paused = next(n for n in tenant.notices() if n.kind == "schedule.auto_paused")
    assert paused.target == created.schedule_id and paused.detail["failed_in_a_row"] == 2
    tenant.resume_schedule(created.schedule_id)
    resumed = [n for n in tenant.notices() if n.kind == "schedule.resumed"]
    assert [n.schedule_id for n in resumed] == [created.schedule_id]


def test_settings_are_read_and_changed_field_by_field(tenant: Tickd, dev: Dev) -> None:
    changed = tenant.patch_settings(pause_after_failures=5)
    assert changed.pause_after_failures == 5 and changed.notify is None
    hook = tenant.patch_settings(notify={"type": "http", "url": f"{dev.url}/healthz", "method": "GET"})
    assert hook.pause_after_failures == 5 and hook.notify is not None and hook.notify["url"].endswith("/healthz")
    assert tenant.get_settings() == hook
    assert tenant.patch_settings(notify=None).notify is None
    with pytest.raises(Invalid) as bad:
        tenant.patch_settings(pause_after_failures=-1)
    assert bad.value.field == "pause_after_failures"


def test_bulk_jobs_count_pause_and_list_by_tag(tenant: Tickd, dev: Dev) -> None:
    made = {
        tenant.create_schedule(delay_s=3600 * (i + 1), callback=dev.healthz(), tags={"team": "sdk"}).schedule_id
        for i in range(4)
    }
    assert {s.schedule_id for s in tenant.list_schedules(tag="team=sdk", page_size=3)} == made  # no window
    counted = tenant.wait_bulk_job(
        tenant.create_bulk_job("pause", tag="team=sdk", dry_run=True).job_id, poll_s=0.1, timeout_s=60
    )
    assert (counted.state, counted.matched, counted.changed) == ("done", 4, 0)
    job = tenant.create_bulk_job("pause", tag="team=sdk", status="scheduled", idempotency_key="sdk-pause")
    assert (
        tenant.create_bulk_job("pause", tag="team=sdk", status="scheduled", idempotency_key="sdk-pause").job_id
        == job.job_id
    )
    done = tenant.wait_bulk_job(job.job_id, poll_s=0.1, timeout_s=60)
    assert (done.matched, done.changed, done.failed) == (4, 4, 0)
    assert {tenant.get_schedule(s).status for s in made} == {"paused"}
    assert [j.job_id for j in tenant.list_bulk_jobs()][:2] == [job.job_id, counted.job_id]
    with pytest.raises(Conflict) as finished:
        tenant.cancel_bulk_job(counted.job_id)
    assert finished.value.code == "already_done"


def test_a_backfill_fires_each_past_occurrence_once_as_its_own_run(tenant: Tickd, dev: Dev) -> None:
    created = tenant.create_schedule(cron="* * * * *", callback=dev.healthz())
    start = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=5)
    end = start + timedelta(minutes=3)
    job = tenant.backfill_schedule(created.schedule_id, start=start, end=end, rate_per_s=10)
    assert job.action == "backfill" and job.filter is None and job.backfill is not None
    assert job.backfill["schedule_id"] == created.schedule_id
    done = tenant.wait_bulk_job(job.job_id, poll_s=0.1, timeout_s=60)
    assert (done.state, done.matched, done.changed, done.unchanged) == ("done", 3, 3, 0)
    deadline = time.monotonic() + 30  # tickd-dev's pollers fire them, one a tenth of a second
    while len(runs := [r for r in tenant.runs(created.schedule_id) if r.backfill and r.status == "succeeded"]) < 3:
        assert time.monotonic() < deadline, f"the backfill's fires are not all delivered after 30 s: {runs}"
        time.sleep(0.2)
    nominals = [start + timedelta(minutes=i) for i in range(3)]
    assert sorted(r.nominal_at for r in runs) == nominals  # the timeline's own runs are not marked backfill
    ms = [int(t.timestamp() * 1000) for t in nominals]
    assert sorted(r.fire_id for r in runs) == [f"{created.schedule_id}:{m}:backfill" for m in ms]
    again = tenant.wait_bulk_job(
        tenant.backfill_schedule(created.schedule_id, start=start, end=end).job_id, poll_s=0.1, timeout_s=60
    )
    assert (again.matched, again.changed, again.unchanged) == (3, 0, 3)  # each occurrence fired once
    with pytest.raises(Invalid) as future:
        tenant.backfill_schedule(created.schedule_id, start=start, end=datetime.now(UTC) + timedelta(hours=1))
    assert (future.value.field, future.value.code) == ("to", "out_of_range")


HOLIDAYS = {"timezone": "Europe/Berlin", "dates": ["2026-12-26", "2026-12-25"]}


def test_calendars_put_get_list_delete(tenant: Tickd) -> None:
    created = tenant.put_calendar("holidays", **HOLIDAYS)
    assert (created.name, created.version, created.timezone) == ("holidays", 1, "Europe/Berlin")
    assert created.dates == ["2026-12-25", "2026-12-26"] and created.ranges == [] and created.weekdays == []
    replaced = tenant.put_calendar(
        "holidays", ranges=[("2026-08-03T00:00", "2026-08-17T00:00")], weekdays=["mon"], business_days=True
    )
    assert (replaced.version, replaced.timezone, replaced.dates) == (2, "UTC", [])  # the whole calendar replaced
    assert replaced.ranges == [{"from": "2026-08-03T00:00:00", "to": "2026-08-17T00:00:00"}]
    assert replaced.weekdays == ["mon", "sat", "sun"]
    assert replaced.created_at == created.created_at and replaced.updated_at >= created.updated_at
    assert tenant.get_calendar("holidays") == replaced
    tenant.put_calendar("blackout")
    assert [(c.name, c.version) for c in tenant.list_calendars()] == [("blackout", 1), ("holidays", 2)]
    assert tenant.delete_calendar("holidays") == replaced  # the calendar as it was
    with pytest.raises(NotFound) as missing:
        tenant.get_calendar("holidays")
    assert (missing.value.code, missing.value.field) == ("not_found", "name")
    with pytest.raises(NotFound):
        tenant.delete_calendar("holidays")
    assert [c.name for c in tenant.list_calendars()] == ["blackout"]


def test_a_calendar_put_answers_201_then_200_with_the_version_as_etag(dev: Dev) -> None:
    answers: list[httpx.Response] = []
    http = httpx.Client(base_url=dev.url, event_hooks={"response": [answers.append]})
    name = f"sdk-{uuid.uuid4().hex[:8]}"
    with Tickd(dev.url, api_key=dev.api_key, http=http) as client:
        first, second = client.put_calendar(name), client.put_calendar(name, weekdays=["sun"])
        client.delete_calendar(name)
    assert [(r.request.method, r.status_code, r.headers.get("ETag")) for r in answers] == [
        ("PUT", 201, '"1"'),
        ("PUT", 200, '"2"'),
        ("DELETE", 200, '"2"'),
    ]
    assert (first.version, second.version, second.weekdays) == (1, 2, ["sun"])


def test_calendar_dates_and_ranges_from_python_values(tenant: Tickd) -> None:
    summer = (datetime(2026, 8, 3), datetime(2026, 8, 17))  # noqa: DTZ001 (wall times on the calendar's clock)
    made = tenant.put_calendar(
        "c",
        dates=[date(2026, 12, 25), "2026-12-26"],
        ranges=[summer, {"from": "2026-09-01T08:00", "to": "2026-09-01T12:00"}],
    )
    assert made.dates == ["2026-12-25", "2026-12-26"]
    assert made.ranges == [
        {"from": "2026-08-03T00:00:00", "to": "2026-08-17T00:00:00"},
        {"from": "2026-09-01T08:00:00", "to": "2026-09-01T12:00:00"},
    ]
    assert tenant.put_calendar("c", ranges=made.ranges).ranges == made.ranges  # a calendar's ranges put back
    with pytest.raises(ValueError, match="wall times"):
        tenant.put_calendar("c", ranges=[(datetime(2026, 8, 3, tzinfo=UTC), datetime(2026, 8, 4, tzinfo=UTC))])
    with pytest.raises(ValueError, match="days"):
        tenant.put_calendar("c", dates=[datetime(2026, 12, 25)])  # noqa: DTZ001
    assert tenant.get_calendar("c").version == 2  # neither refused one was sent
    with pytest.raises(Invalid) as bad:
        tenant.put_calendar("c", ranges=[("2026-08-17T00:00", "2026-08-03T00:00")])
    assert (bad.value.status, bad.value.field) == (422, "ranges.0.to")
    with pytest.raises(Invalid) as name:
        tenant.put_calendar("Not A Name")
    assert name.value.field == "name"


def test_calendar_if_match_changes_or_deletes_only_the_version_read(tenant: Tickd) -> None:
    first = tenant.put_calendar("h", **HOLIDAYS)
    with pytest.raises(PreconditionFailed) as stale:
        tenant.put_calendar("h", if_match=first.version + 6)
    assert (stale.value.status, stale.value.code, stale.value.field) == (412, "precondition_failed", "If-Match")
    with pytest.raises(PreconditionFailed):
        tenant.delete_calendar("h", if_match=7)
    with pytest.raises(PreconditionFailed):  # a name with no calendar has no version to match
        tenant.put_calendar("new", if_match="*")
    assert tenant.get_calendar("h") == first  # nothing changed
    second = tenant.put_calendar("h", dates=["2027-01-01"], if_match=first.version)
    assert (second.version, second.dates) == (2, ["2027-01-01"])
    with pytest.raises(PreconditionFailed):
        tenant.delete_calendar("h", if_match=first.version)
    assert tenant.delete_calendar("h", if_match=f'"{second.version}"').version == 2
    assert tenant.list_calendars() == []


def test_schedules_name_calendars_and_a_preview_shows_what_they_exclude(tenant: Tickd, dev: Dev) -> None:
    tenant.put_calendar("holidays", **HOLIDAYS)
    tenant.put_calendar("holidays", **HOLIDAYS)  # version 2
    tenant.put_calendar("weekends", business_days=True)
    rule: RuleFields = {"cron": "0 9 * * *", "timezone": "Europe/Berlin", "calendars": ["holidays", "weekends"]}
    shown = tenant.preview(**rule, count=4, after="2026-12-24T12:00:00Z")
    assert [(o.local.date().isoformat(), o.excluded_by) for o in shown] == [
        ("2026-12-25", "holidays v2"),
        ("2026-12-26", "holidays v2"),  # a Saturday too: the first calendar named is the one shown
        ("2026-12-27", "weekends v1"),
        ("2026-12-28", None),
    ]
    plain = tenant.preview(**{**rule, "calendars": []}, count=4, after="2026-12-24T12:00:00Z")
    assert [o.excluded_by for o in plain] == [None] * 4 and [o.utc for o in plain] == [o.utc for o in shown]

    created = tenant.create_schedule(cron="0 9 * * *", calendars=("weekends", "weekends"), callback=dev.healthz())
    assert created.recurrence is not None and created.recurrence.calendars == ["weekends"]  # each named once
    assert created.fire_at.weekday() < 5  # the first fire is the first the calendar leaves
    assert tenant.get_schedule(created.schedule_id).recurrence == created.recurrence
    freed = tenant.update_schedule(created.schedule_id, calendars=[])
    assert freed.recurrence is not None and freed.recurrence.calendars is None
    named = tenant.update_schedule(created.schedule_id, calendars=["holidays"])
    assert named.recurrence is not None and named.recurrence.calendars == ["holidays"]
    cleared = tenant.update_schedule(created.schedule_id, calendars=None)
    assert cleared.recurrence is not None and cleared.recurrence.calendars is None
    keyed = tenant.put_schedule_by_key("k", cron="0 9 * * *", calendars=["holidays"], callback=dev.healthz())
    assert keyed.recurrence is not None and keyed.recurrence.calendars == ["holidays"]

    batch = tenant.create_schedules(
        [
            {"cron": "0 9 * * *", "calendars": ["weekends"], "callback": dev.healthz()},
            {"cron": "0 9 * * *", "calendars": ["nope"], "callback": dev.healthz()},
        ]
    )
    assert batch[0].schedule_id is not None and batch[1].error is not None
    assert (batch[1].error.code, batch[1].error.field) == ("unknown_calendar", "calendars.0")
    in_batch = tenant.get_schedule(batch[0].schedule_id).recurrence
    assert in_batch is not None and in_batch.calendars == ["weekends"]
    with pytest.raises(Invalid) as unknown:
        tenant.create_schedule(cron="0 9 * * *", calendars=["weekends", "nope"], callback=dev.healthz())
    assert (unknown.value.status, unknown.value.code, unknown.value.field) == (422, "unknown_calendar", "calendars.1")
    with pytest.raises(Invalid) as lone:
        tenant.preview(cron="0 9 * * *", calendars="weekends")  # one name, not a list: the API says so
    assert lone.value.field == "calendars"


def test_a_missed_fire_policy_on_create_batch_by_key_and_patch(tenant: Tickd, dev: Dev) -> None:
    created = tenant.create_schedule(every="1h", missed={"policy": "skip", "deadline": "90s"}, callback=dev.healthz())
    assert created.recurrence is not None and created.recurrence.missed == MissedPolicy("skip", 90)
    assert tenant.get_schedule(created.schedule_id).recurrence == created.recurrence
    once = tenant.update_schedule(created.schedule_id, missed={"policy": "fire_once"})
    assert once.recurrence is not None and once.recurrence.missed == MissedPolicy("fire_once", 60)  # default deadline
    kept = tenant.update_schedule(created.schedule_id, every="2h")
    assert kept.recurrence is not None and kept.recurrence.missed == MissedPolicy("fire_once", 60)  # a rule change
    cleared = tenant.update_schedule(created.schedule_id, missed=None)
    assert cleared.recurrence is not None and cleared.recurrence.missed is None  # the client's default applies
    again = tenant.update_schedule(created.schedule_id, missed=created.recurrence.missed)  # a policy as read back
    assert again.recurrence is not None and again.recurrence.missed == MissedPolicy("skip", 90)
    keyed = tenant.put_schedule_by_key("k", cron="0 9 * * *", missed={"policy": "fire_all"}, callback=dev.healthz())
    assert keyed.recurrence is not None and keyed.recurrence.missed == MissedPolicy("fire_all", None)
    batch = tenant.create_schedules(
        [
            {"every": "1h", "missed": {"policy": "fire_once", "deadline": "2m"}, "callback": dev.healthz()},
            {"every": "1h", "missed": {"policy": "skip", "deadline": "8d"}, "callback": dev.healthz()},
        ]
    )
    assert batch[0].schedule_id is not None and batch[0].error is None
    assert batch[1].error is not None and (batch[1].error.status, batch[1].error.field) == (422, "missed.deadline")
    in_batch = tenant.get_schedule(batch[0].schedule_id).recurrence
    assert in_batch is not None and in_batch.missed == MissedPolicy("fire_once", 120)
    plain = tenant.create_schedule(every="1h", callback=dev.healthz())
    assert plain.recurrence is not None and plain.recurrence.missed is None


def test_a_bad_missed_fire_policy_is_invalid_naming_the_field(tenant: Tickd, dev: Dev) -> None:
    later: Any = {"policy": "later"}
    with pytest.raises(Invalid) as unknown:
        tenant.create_schedule(every="1h", missed=later, callback=dev.healthz(), tags={"missed": "bad"})
    assert (unknown.value.status, unknown.value.field) == (400, "missed.policy")
    with pytest.raises(Invalid) as deadline:
        tenant.create_schedule(
            every="1h", missed={"policy": "fire_all", "deadline": "60s"}, callback=dev.healthz(), tags={"missed": "bad"}
        )
    assert (deadline.value.status, deadline.value.field) == (422, "missed.deadline")
    with pytest.raises(Invalid) as once:
        tenant.create_schedule(delay_s=60, missed={"policy": "skip"}, callback=dev.healthz(), tags={"missed": "bad"})
    assert (once.value.status, once.value.field) == (422, "missed")  # a one-time schedule takes none
    assert list(tenant.list_schedules(tag="missed=bad")) == []  # none of them was written
    with pytest.raises(Invalid) as settings:
        tenant.patch_settings(missed={"policy": "skip", "deadline": "8d"})
    assert (settings.value.status, settings.value.field) == (422, "missed.deadline")
    assert tenant.get_settings().missed == MissedPolicy("fire_all", None)


def test_the_default_missed_fire_policy_is_set_and_reset_in_settings(tenant: Tickd) -> None:
    assert tenant.get_settings().missed == MissedPolicy("fire_all", None)
    changed = tenant.patch_settings(missed={"policy": "skip", "deadline": "5m"})
    assert changed.missed == MissedPolicy("skip", 300)
    other = tenant.patch_settings(pause_after_failures=3)  # missed not given: unchanged
    assert (other.pause_after_failures, other.missed) == (3, MissedPolicy("skip", 300))
    assert tenant.get_settings() == other
    reset = tenant.patch_settings(missed=None)
    assert (reset.pause_after_failures, reset.missed) == (3, MissedPolicy("fire_all", None))


def test_the_missed_fire_policy_in_request_bodies() -> None:
    assert calls.patch_settings().body == {}  # not given: not sent
    assert calls.patch_settings(missed=None).body == {"missed": None}
    assert calls.patch_settings(missed=MissedPolicy("skip", 300)).body == {
        "missed": {"policy": "skip", "deadline": "300s"}
    }
    assert calls.patch_settings(missed=MissedPolicy("fire_all")).body == {"missed": {"policy": "fire_all"}}
    assert calls.update_schedule("s", {"missed": None}).body == {"missed": None}
    given = calls.create_schedule({"every": "1h", "missed": {"policy": "fire_once", "deadline": "2m"}}, None)
    assert given.body == {"every": "1h", "missed": {"policy": "fire_once", "deadline": "2m"}}
