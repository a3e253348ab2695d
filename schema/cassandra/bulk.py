"""Schedules by tag (an index entry per tag, sharded by schedule id) and bulk jobs (a row per job, its
lease and progress written with compare-and-set; the open ones listed in one small partition).

The tag index is written with the schedule and never updated: a reader checks the schedule itself, so a
stale entry (a tag removed, a schedule finished) costs a read and is never an answer."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime
from uuid import UUID

from tickd.schema import timing
from tickd.schema.cassandra.bridge import Part, Row, Write, utc
from tickd.schema.errors import Conflict
from tickd.schema.model import BulkFilter, BulkJob, BulkState, Schedule, Status

TAG_SHARDS = 16
# Before every schedule id in Cassandra's uuid order (version 0 first), and after every v1 job id.
FIRST_ID = UUID(int=0)
PAST_EVERY_JOB = UUID(int=(1 << 128) - 1)


def tag_text(tag: tuple[str, str]) -> str:
    return f"{tag[0]}={tag[1]}"


def shard_of(schedule_id: UUID) -> int:
    return schedule_id.int % TAG_SHARDS


def tag_writes(s: Schedule, now: datetime, retention_s: int) -> list[Write]:
    """The index entries of ``s``'s tags: a one-time schedule's expire with its row, a recurring one's
    (its row moves on with every occurrence) when a reader finds it gone."""
    if s.options is None or not s.options.tags:
        return []
    ttl = 0 if s.repeat is not None else timing.row_ttl_s(s.location.due_at, now, retention_s)
    key = {"client_id": s.client_id, "shard": shard_of(s.schedule_id), "schedule_id": s.schedule_id}
    return [("insert_tag", {**key, "tag": tag_text(t), "ttl": ttl}) for t in s.options.tags]


def encode_filter(f: BulkFilter) -> str:
    return json.dumps(
        {
            "tag": tag_text(f.tag) if f.tag is not None else None,
            "status": f.status.value if f.status is not None else None,
            "from": timing.to_epoch_ms(f.due_from) if f.due_from is not None else None,
            "to": timing.to_epoch_ms(f.due_to) if f.due_to is not None else None,
            "target": f.target,
            **({"schedule_id": str(f.schedule_id)} if f.schedule_id is not None else {}),
            **({"rate_per_s": f.rate_per_s} if f.rate_per_s is not None else {}),
        }
    )


def decode_filter(text: str) -> BulkFilter:
    raw = json.loads(text)
    tag: tuple[str, str] | None = None
    if raw.get("tag") is not None:
        key, _, value = raw["tag"].partition("=")
        tag = (key, value)
    return BulkFilter(
        tag,
        Status(raw["status"]) if raw.get("status") else None,
        timing.from_epoch_ms(raw["from"]) if raw.get("from") is not None else None,
        timing.from_epoch_ms(raw["to"]) if raw.get("to") is not None else None,
        raw.get("target"),
        UUID(raw["schedule_id"]) if raw.get("schedule_id") else None,
        raw.get("rate_per_s"),
    )


def _progress(job: BulkJob) -> dict[str, object]:
    """A job's progress columns: where it is and what it counted."""
    return {
        "cursor": job.cursor,
        "matched": job.matched,
        "changed": job.changed,
        "unchanged": job.unchanged,
        "failed": job.failed,
        "failures": json.dumps([list(f) for f in job.failures]),
    }


def _job(row: Row) -> BulkJob:
    return BulkJob(
        client_id=row.client_id,
        job_id=row.job_id,
        action=row.action,
        filter=decode_filter(row.filter),
        dry_run=bool(row.dry_run),
        state=BulkState(row.state),
        created_at=utc(row.created_at),
        updated_at=utc(row.updated_at),
        actor=row.actor or "",
        request_id=row.request_id or "",
        cursor=row.cursor,
        matched=row.matched or 0,
        changed=row.changed or 0,
        unchanged=row.unchanged or 0,
        failed=row.failed or 0,
        failures=tuple((str(a), str(b)) for a, b in json.loads(row.failures or "[]")),
        finished_at=utc(row.finished_at) if row.finished_at is not None else None,
        owner=row.owner or "",
        lease_until=utc(row.lease_until) if row.lease_until is not None else None,
    )


class BulkJobs(Part):
    """``schema.store.BulkStore`` on the adapter's connection."""

    # -- the tag index --------------------------------------------------------------------------------

    async def tagged(
        self, client_id: str, tag: tuple[str, str], shard: int, after: UUID | None, max_rows: int
    ) -> list[UUID]:
        """Schedule ids under ``tag`` in one shard, after ``after``, in Cassandra's uuid order."""
        values = {
            "client_id": client_id,
            "tag": tag_text(tag),
            "shard": shard,
            "after": after or FIRST_ID,
            "max_rows": max_rows,
        }
        return [row.schedule_id for row in await self._db.rows("read_tagged", values)]

    async def forget_tagged(self, client_id: str, tag: tuple[str, str], schedule_id: UUID) -> None:
        """Drop an index entry whose schedule is gone (a recurring schedule's, which has no TTL)."""
        key = {"client_id": client_id, "tag": tag_text(tag), "shard": shard_of(schedule_id)}
        await self._db.write("delete_tag", {**key, "schedule_id": schedule_id})

    # -- jobs -----------------------------------------------------------------------------------------

    def _job_ttl(self, job: BulkJob, now: datetime) -> int:
        """Seconds left until the job expires (its creation plus the audit retention): every write of it
        expires at that moment, so it never outlives itself in part."""
        ends = job.created_at.timestamp() + self._audit_retention(job.client_id)
        return max(1, int(ends - now.timestamp()))

    async def create_bulk_job(self, job: BulkJob) -> BulkJob:
        """Store a new job and list it as open; the job stored under its id if one already is."""
        ttl = self._job_ttl(job, job.created_at)
        values = {
            "client_id": job.client_id,
            "job_id": job.job_id,
            "action": job.action,
            "filter": encode_filter(job.filter),
            "dry_run": job.dry_run,
            "state": job.state.value,
            **_progress(job),
            "actor": job.actor,
            "request_id": job.request_id,
            "created_at": job.created_at,
            "updated_at": job.updated_at,
            "owner": "",
            "lease_until": job.created_at,
            "ttl": ttl,
        }
        # Open first: a job stored but not listed would never run; one listed but not stored (its insert
        # failed, or is still on its way) is passed over by the replicas, and expires with the job it lists.
        await self._db.write("open_bulk_job", {"client_id": job.client_id, "job_id": job.job_id, "ttl": ttl})
        applied, _ = await self._db.applied("insert_bulk_job", values)
        if applied:
            return job
        stored = await self.get_bulk_job(job.client_id, job.job_id)
        if stored is None:
            raise Conflict("the job could not be stored; retry")
        return stored

    async def get_bulk_job(self, client_id: str, job_id: UUID) -> BulkJob | None:
        rows = await self._db.rows("get_bulk_job", {"client_id": client_id, "job_id": job_id})
        return _job(rows[0]) if rows and rows[0].action is not None else None

    async def list_bulk_jobs(self, client_id: str, before: UUID | None, max_rows: int) -> list[BulkJob]:
        """A client's jobs, newest first, strictly before ``before``."""
        values = {"client_id": client_id, "before": before or PAST_EVERY_JOB, "max_rows": max_rows}
        return [_job(r) for r in await self._db.rows("list_bulk_jobs", values) if r.action is not None]

    async def open_bulk_jobs(self, max_rows: int) -> list[tuple[str, UUID]]:
        """(client id, job id) of jobs not finished yet."""
        rows = await self._db.rows("list_open_bulk_jobs", {"max_rows": max_rows})
        return [(r.client_id, r.job_id) for r in rows]

    async def take_bulk_job(self, job: BulkJob, owner: str, lease_until: datetime, now: datetime) -> BulkJob | None:
        """Take ``job``'s lease from the owner and lease it was read with; None if someone moved them since."""
        state = BulkState.RUNNING if job.state is BulkState.QUEUED else job.state
        values = {
            "client_id": job.client_id,
            "job_id": job.job_id,
            "owner": owner,
            "lease_until": lease_until,
            "state": state.value,
            "updated_at": now,
            "seen_owner": job.owner,
            "seen_lease": job.lease_until or job.created_at,
            "ttl": self._job_ttl(job, now),
        }
        applied, _ = await self._db.applied("take_bulk_job", values)
        if not applied:
            return None
        return dataclasses.replace(job, owner=owner, lease_until=lease_until, state=state, updated_at=now)

    async def save_bulk_job(self, job: BulkJob, seen_state: BulkState) -> bool:
        """Save a page's progress under the job's lease (``job.owner``), if the job is still in
        ``seen_state``; False if it is not, or another owner took it (the caller stops)."""
        values = {
            "client_id": job.client_id,
            "job_id": job.job_id,
            "state": job.state.value,
            **_progress(job),
            "updated_at": job.updated_at,
            "finished_at": job.finished_at,
            "lease_until": job.lease_until,
            "owner": job.owner,
            "seen_state": seen_state.value,
            "ttl": self._job_ttl(job, job.updated_at),
        }
        applied, _ = await self._db.applied("save_bulk_job", values)
        if applied and job.state in (BulkState.DONE, BulkState.CANCELLED):
            await self.close_bulk_job(job.client_id, job.job_id)
        return applied

    async def stop_bulk_job(self, job: BulkJob, now: datetime) -> bool:
        """Cancel ``job`` if it is still in the state it was read in; False if it moved on meanwhile."""
        values = {
            "client_id": job.client_id,
            "job_id": job.job_id,
            "state": BulkState.CANCELLED.value,
            "updated_at": now,
            "finished_at": now,
            "seen_state": job.state.value,
            "ttl": self._job_ttl(job, now),
        }
        applied, _ = await self._db.applied("stop_bulk_job", values)
        if applied:
            await self.close_bulk_job(job.client_id, job.job_id)
        return applied

    async def close_bulk_job(self, client_id: str, job_id: UUID) -> None:
        """No longer list the job as open."""
        await self._db.write("close_bulk_job", {"client_id": client_id, "job_id": job_id})
