"""A client's own settings (the default for pausing recurring schedules after failed fires, where its
notifications go) and its notification feed (``schema.notices``)."""

from __future__ import annotations

import dataclasses

import msgspec
from aiohttp import web
from msgspec import UnsetType

from tickd.schema.model import Client, ClientSettings
from tickd.service import audit, keys, params, recurring
from tickd.service.declare import Routes
from tickd.service.errors import Invalid, json_response
from tickd.service.routes.audit import client_page
from tickd.service.routes.common import read_json
from tickd.service.routes.schedules import checked_callback
from tickd.service.validation import SettingsPatch, decode
from tickd.service.views import NoticeList, SettingsView, notice_view, settings_view

_MAX_SETTINGS_BODY = 16 * 1024
_MIN_RETENTION_S = 3600

routes = Routes("settings")


@routes.get("/v1/settings", "The client's own settings", response=SettingsView)
async def get_settings(request: web.Request) -> web.Response:
    client = await request.app[keys.AUTH].client(request)
    return json_response(settings_view(client.settings, request.app[keys.SETTINGS]))


@routes.patch(
    "/v1/settings",
    "Change the client's own settings: pause_after_failures, notify, retention_s, audit_retention_s, missed",
    response=SettingsView,
    request=SettingsPatch,
    description="missed: the missed-fire policy of its recurring schedules that name none ({policy: fire_all | "
    "skip | fire_once, deadline: '90s'}; null: fire_all). "
    "pause_after_failures: a recurring schedule whose fires end dead-lettered this many times "
    "in a row is paused (0: never; a schedule's own pause_after_failures wins). notify: an HTTP or Kafka "
    "target (checked as a callback is) that each notification is delivered to, signed and retried like a "
    "fire; null: notifications are kept in GET /v1/notifications only. retention_s (runs, dead letters, "
    "schedules after their fire, notices) and audit_retention_s (audit records): seconds, 3600 up to "
    "retention_max_s / audit_retention_max_s, 0 for the deployment's default; they apply to records written "
    "from then on. Pollers see a change within their client refresh (a few seconds).",
)
async def patch_settings(request: web.Request) -> web.Response:
    client = await request.app[keys.AUTH].client(request)
    raw = await read_json(request, _MAX_SETTINGS_BODY)
    patch = decode(SettingsPatch, raw)
    request.app[keys.LIMITER].take(client.client_id)  # a notify target's check costs a DNS lookup
    settings = request.app[keys.SETTINGS]
    bounded: dict[str, int] = {}
    for name, most, env in (  # checked before the notify target's DNS lookup: the cheap refusals first
        ("retention_s", settings.retention_max_s, "TICKD_RETENTION_MAX_S"),
        ("audit_retention_s", settings.audit_retention_max_s, "TICKD_AUDIT_RETENTION_MAX_S"),
    ):
        given = getattr(patch, name)
        if isinstance(given, UnsetType):
            continue
        if given and not _MIN_RETENTION_S <= given <= most:
            why = f"{name} is {_MIN_RETENTION_S} to {most} seconds ({env}), or 0 for this deployment's default"
            raise Invalid(why, field=name, code="out_of_range")
        bounded[name] = given
    target = client.settings.notify
    if not isinstance(patch.notify, UnsetType):
        target = None if patch.notify is None else await checked_callback(request, client, patch.notify, "notify")
    # The settings as stored now, not as this replica's client cache holds them (up to TICKD_CLIENT_CACHE_S
    # old): a change made through another replica a moment ago is kept, not overwritten by the cached copy.
    stored = await request.app[keys.STORE].get_client(client.client_id)
    changed = msgspec.structs.replace((stored or client).settings, **bounded)
    if not isinstance(patch.pause_after_failures, UnsetType):
        changed = msgspec.structs.replace(changed, pause_after_failures=patch.pause_after_failures)
    if not isinstance(patch.notify, UnsetType):
        changed = msgspec.structs.replace(changed, notify=target)
    if not isinstance(patch.missed, UnsetType):
        changed = msgspec.structs.replace(changed, missed=recurring.missed_of(patch.missed))
    await request.app[keys.STORE].set_client_settings(client.client_id, changed)
    _remember(request, client, changed)
    await audit.changed(request, client.client_id, client, "client.settings", client.client_id, raw)
    return json_response(settings_view(changed, settings))


def _remember(request: web.Request, client: Client, settings: ClientSettings) -> None:
    """This replica answers with the new settings at once (others within their client cache's life)."""
    request.app[keys.AUTH].cache.put(client.client_id, dataclasses.replace(client, settings=settings))


@routes.get(
    "/v1/notifications",
    "The client's notifications, newest first, paged: schedules auto-paused, fires dead-lettered, resumes",
    response=NoticeList,
    query=params.AuditQuery,
    description="from/to: the range of notice times (default the last 7 days, at most 31). Each notice: "
    "notice_id, at, kind (schedule.auto_paused, fire.dead_lettered, schedule.resumed), target (the schedule "
    "or fire id), schedule_id, detail. The same notice is delivered to the client's notify target if it set "
    "one (PATCH /v1/settings). Kept TICKD_RETENTION_S.",
)
async def list_notices(request: web.Request) -> web.Response:
    client = await request.app[keys.AUTH].client(request)
    found, cursor = await client_page(request, request.app[keys.STORE].page_notices, client.client_id)
    return json_response(NoticeList([notice_view(r) for r in found], cursor))
