"""Versions and If-Match over the API: every schedule answer carries its version as the ETag; a change
sent with If-Match applies only to that version (412 otherwise, nothing changed), including under 20
concurrent PATCHes of one version; malformed If-Match values are 400s naming the header.

``tests/integration/test_api_versions_cassandra.py`` runs the race tests here on Cassandra."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

from tests.integration.api_helpers import Api, Register, schedule_body

pytest_plugins = ["tests.integration.api_fixtures"]


def later(moment: str) -> str:
    return (datetime.fromisoformat(moment) + timedelta(minutes=1)).isoformat()


async def answer(resp: Any, status: int = 200) -> tuple[dict[str, Any], str]:
    assert resp.status == status, await resp.text()
    return await resp.json(), resp.headers["ETag"]


async def refused(resp: Any, status: int, code: str) -> dict[str, Any]:
    body = await resp.json()
    assert resp.status == status, body
    assert body["error"]["code"] == code and body["error"]["field"] == "If-Match", body
    return body


async def test_every_change_moves_the_version_and_the_etag_is_it(api: Api, register: Register) -> None:
    _, key = await register()
    made, tag = await answer(await api.post("/v1/schedules", json=schedule_body(), headers=key), 201)
    assert tag == f'"{made["version"]}"'
    path = f"/v1/schedules/{made['schedule_id']}"
    got, got_tag = await answer(await api.get(path, headers=key))
    assert got_tag == tag and got["version"] == made["version"]
    seen = [made["version"]]
    for method, suffix, body in (
        ("PATCH", "", {"payload": {"v": 2}}),
        ("POST", "/pause", None),
        ("POST", "/resume", None),
    ):
        changed, changed_tag = await answer(await api.request(method, path + suffix, json=body, headers=key))
        assert changed_tag == f'"{changed["version"]}"', (method, suffix)
        seen.append(changed["version"])
    assert seen == sorted(set(seen)), seen  # each change a new, higher version
    # A cancel ends the schedule at the version it was cancelled at: its answer, GET and a listing agree,
    # and a repeated cancel with that ETag is the idempotent 200.
    cancelled, cancelled_tag = await answer(await api.delete(path, headers={**key, "If-Match": f'"{seen[-1]}"'}))
    assert cancelled["status"] == "cancelled" and cancelled_tag == f'"{seen[-1]}"'
    assert (await answer(await api.get(path, headers=key)))[1] == cancelled_tag
    assert (await answer(await api.delete(path, headers={**key, "If-Match": cancelled_tag})))[0] == cancelled
    # A listing's items carry the version too (no headers per item).
    listed = await api.get(
        "/v1/schedules",
        params={"from": made["created_at"], "to": later(made["fire_at"]), "status": "cancelled"},
        headers=key,
    )
    assert [(s["schedule_id"], s["version"]) for s in (await listed.json())["schedules"]] == [
        (made["schedule_id"], seen[-1])
    ]


async def test_a_stale_if_match_changes_nothing(api: Api, register: Register) -> None:
    _, key = await register()
    made, old_tag = await answer(await api.post("/v1/schedules", json=schedule_body(), headers=key), 201)
    path = f"/v1/schedules/{made['schedule_id']}"
    _, new_tag = await answer(await api.patch(path, json={"payload": {"v": 2}}, headers={**key, "If-Match": old_tag}))
    assert new_tag != old_tag
    before, _ = await answer(await api.get(path, headers=key))
    for method, suffix, body in (
        ("PATCH", "", {"payload": {"v": 3}}),
        ("POST", "/pause", None),
        ("DELETE", "", None),
    ):
        resp = await api.request(method, path + suffix, json=body, headers={**key, "If-Match": old_tag})
        error = await refused(resp, 412, "precondition_failed")
        assert resp.headers["ETag"] == new_tag and new_tag in error["error"]["message"]
    assert (await answer(await api.get(path, headers=key)))[0] == before  # nothing changed
    # A list naming the current version matches; so does *.
    _, tag = await answer(
        await api.patch(path, json={"payload": {"v": 4}}, headers={**key, "If-Match": f"{old_tag}, {new_tag}"})
    )
    paused, _ = await answer(await api.post(f"{path}/pause", headers={**key, "If-Match": "*"}))
    assert paused["status"] == "paused"
    resp = await api.post(f"{path}/resume", headers={**key, "If-Match": tag})  # the pause moved it on
    await refused(resp, 412, "precondition_failed")


async def test_twenty_concurrent_patches_of_one_version_one_wins(api: Api, register: Register) -> None:
    _, key = await register()
    made, tag = await answer(await api.post("/v1/schedules", json=schedule_body(), headers=key), 201)
    path = f"/v1/schedules/{made['schedule_id']}"

    async def patch(n: int) -> tuple[int, Any]:
        resp = await api.patch(path, json={"payload": {"n": n}}, headers={**key, "If-Match": tag})
        return resp.status, await resp.json()

    answers = await asyncio.gather(*(patch(n) for n in range(20)))
    won = [body for status, body in answers if status == 200]
    assert len(won) == 1, [status for status, _ in answers]
    assert all(
        status == 412 and body["error"]["code"] == "precondition_failed" for status, body in answers if status != 200
    )
    live, live_tag = await answer(await api.get(path, headers=key))
    assert live["payload"] == won[0]["payload"] and live_tag == f'"{won[0]["version"]}"'


async def test_by_key_put_and_delete_take_if_match(api: Api, register: Register) -> None:
    _, key = await register()
    path = "/v1/schedules/by-key/order-7"
    # If-Match on a key with no schedule: nothing to match, nothing created.
    await refused(
        await api.put(path, json=schedule_body(), headers={**key, "If-Match": "*"}), 412, "precondition_failed"
    )
    assert (await api.get(path, headers=key)).status == 404
    _, tag = await answer(await api.put(path, json=schedule_body(), headers=key), 201)
    _, tag2 = await answer(await api.put(path, json=schedule_body(payload={"v": 2}), headers={**key, "If-Match": tag}))
    resp = await api.put(path, json=schedule_body(payload={"v": 3}), headers={**key, "If-Match": tag})
    await refused(resp, 412, "precondition_failed")
    await refused(await api.delete(path, headers={**key, "If-Match": tag}), 412, "precondition_failed")
    cancelled, _ = await answer(await api.delete(path, headers={**key, "If-Match": tag2}))
    assert cancelled["status"] == "cancelled" and cancelled["payload"] == {"v": 2}


async def test_malformed_if_match_is_a_400_naming_it(api: Api, register: Register) -> None:
    _, key = await register()
    made, tag = await answer(await api.post("/v1/schedules", json=schedule_body(), headers=key), 201)
    path = f"/v1/schedules/{made['schedule_id']}"
    bad = [
        '"7',
        '7"',
        'W/"7"',
        '"abc"',
        '"-1"',
        '""',
        '"1' + "0" * 19 + '"',
        ", ".join(['"1"'] * 17),
        '"1",',
        "* , *",
        "\u00e9",
    ]
    for value in bad:
        resp = await api.patch(path, json={"payload": {"x": 1}}, headers={**key, "If-Match": value})
        await refused(resp, 400, (await resp.json())["error"]["code"])
    twice = await api.patch(
        path, json={"payload": {"x": 1}}, headers=[*key.items(), ("If-Match", tag), ("If-Match", tag)]
    )
    await refused(twice, 400, (await twice.json())["error"]["code"])
    assert (await answer(await api.get(path, headers=key)))[1] == tag  # none of them changed it
    # The bare version is taken as its ETag (some clients drop the quotes).
    _, moved = await answer(await api.patch(path, json={"payload": 2}, headers={**key, "If-Match": tag.strip('"')}))
    assert moved != tag
