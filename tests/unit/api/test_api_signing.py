"""Callback signing secrets over the API: shown once at registration and at each rotation, never on a
read, rotated by the admin only, the previous secret kept valid for the overlap."""

from __future__ import annotations

import base64
import uuid
from datetime import UTC, datetime, timedelta

from tests.integration.api_helpers import ADMIN, Api, Register, serve, with_settings
from tickd.schema.model import Client
from tickd.schema.store import Store
from tickd.service.settings import ApiSettings

pytest_plugins = ["tests.integration.api_fixtures"]


def _is_secret(value: object) -> bool:
    assert isinstance(value, str) and value.startswith("whsec_")
    return len(base64.b64decode(value.removeprefix("whsec_"), validate=True)) == 32


async def _secret_of(store: Store, client_id: str) -> tuple[str, str, datetime | None]:
    client = await store.get_client(client_id)
    assert client is not None
    return client.signing_secret, client.signing_secret_previous, client.signing_previous_until


async def test_registration_shows_the_secret_once(api: Api, store: Store) -> None:
    client_id = f"t{uuid.uuid4().hex[:12]}"
    resp = await api.post("/v1/clients", json={"client_id": client_id, "poller_count": 1}, headers=ADMIN)
    body = await resp.json()
    assert resp.status == 201 and _is_secret(body["signing_secret"])
    assert (await _secret_of(store, client_id))[0] == body["signing_secret"]
    got = await (await api.get(f"/v1/clients/{client_id}", headers=ADMIN)).json()
    listed = await (await api.get("/v1/clients", headers=ADMIN)).json()
    patched = await (await api.patch(f"/v1/clients/{client_id}", json={"active": True}, headers=ADMIN)).json()
    for view in [got, patched, *[c for c in listed["clients"] if c["client_id"] == client_id]]:
        assert "signing_secret" not in view and "api_key" not in view
    assert (await _secret_of(store, client_id))[0] == body["signing_secret"]  # a patch keeps it


async def test_rotation_shows_the_new_secret_and_keeps_the_old_one_a_day(api: Api, store: Store) -> None:
    client_id = f"t{uuid.uuid4().hex[:12]}"
    first = await (
        await api.post("/v1/clients", json={"client_id": client_id, "poller_count": 1}, headers=ADMIN)
    ).json()
    before = datetime.now(UTC)
    resp = await api.post(f"/v1/clients/{client_id}/signing-secrets", headers=ADMIN)
    body = await resp.json()
    assert resp.status == 201 and body["client_id"] == client_id and _is_secret(body["signing_secret"])
    assert body["signing_secret"] != first["signing_secret"]
    until = datetime.fromisoformat(body["previous_valid_until"])
    assert timedelta(hours=24, seconds=-1) <= until - before <= timedelta(hours=24, seconds=5)
    current, previous, stored_until = await _secret_of(store, client_id)
    assert (current, previous, stored_until) == (body["signing_secret"], first["signing_secret"], until)
    client = await store.get_client(client_id)
    assert client is not None and client.signing_secrets(until - timedelta(seconds=1)) == (current, previous)
    assert client.signing_secrets(until) == (current,)

    again = await (await api.post(f"/v1/clients/{client_id}/signing-secrets", headers=ADMIN)).json()
    assert (await _secret_of(store, client_id))[:2] == (again["signing_secret"], body["signing_secret"])


async def test_overlap_zero_drops_the_old_secret_at_once(api_settings: ApiSettings, store: Store) -> None:
    async for api in serve(with_settings(api_settings, signing_overlap_s=0), store):
        client_id = f"t{uuid.uuid4().hex[:12]}"
        await api.post("/v1/clients", json={"client_id": client_id, "poller_count": 1}, headers=ADMIN)
        body = await (await api.post(f"/v1/clients/{client_id}/signing-secrets", headers=ADMIN)).json()
        assert body["previous_valid_until"] is None
        client = await store.get_client(client_id)
        assert client is not None and client.signing_secrets(datetime.now(UTC)) == (body["signing_secret"],)


async def test_a_client_registered_before_secrets_gets_one_on_rotation(api: Api, store: Store) -> None:
    legacy, at = f"t{uuid.uuid4().hex[:12]}", datetime.now(UTC)
    assert await store.create_client(Client(legacy, 1, True, "h", at, at))  # a row from before migration 006
    body = await (await api.post(f"/v1/clients/{legacy}/signing-secrets", headers=ADMIN)).json()
    current, previous, _ = await _secret_of(store, legacy)
    assert current == body["signing_secret"] and _is_secret(previous)  # made lazily, then rotated out


async def test_rotation_of_an_unknown_client_is_404(api: Api) -> None:
    resp = await api.post("/v1/clients/nobody-here/signing-secrets", headers=ADMIN)
    assert resp.status == 404 and (await resp.json())["error"]["code"] == "not_found"


async def test_only_the_admin_rotates(api: Api, register: Register, store: Store) -> None:
    victim, victim_key = await register()
    _, other_key = await register()
    before = await _secret_of(store, victim)
    cases = [
        (other_key, 403, "forbidden"),  # another tenant
        (victim_key, 403, "forbidden"),  # the client itself: like API keys, an admin operation
        ({}, 401, "unauthorized"),
        ({"Authorization": "Bearer wrong-token"}, 401, "unauthorized"),
    ]
    for headers, status, code in cases:
        resp = await api.post(f"/v1/clients/{victim}/signing-secrets", headers=headers)
        assert resp.status == status and (await resp.json())["error"]["code"] == code
        assert "signing_secret" not in await resp.text()
    assert await _secret_of(store, victim) == before


async def test_a_rotation_that_lost_a_race_is_409(api: Api, register: Register, store: Store) -> None:
    client_id, _ = await register()
    real = store.rotate_signing_secret

    async def lose(*args: object) -> bool:
        return False

    store.rotate_signing_secret = lose  # type: ignore[method-assign]
    try:
        resp = await api.post(f"/v1/clients/{client_id}/signing-secrets", headers=ADMIN)
    finally:
        store.rotate_signing_secret = real  # type: ignore[method-assign]
    assert resp.status == 409 and (await resp.json())["error"]["code"] == "conflict"
