"""What the simulation promised and what it saw, and the invariants that compare the two.

The workload records every acknowledged operation (a create, cancel or reschedule that returned);
the subscribers record every delivery with the node, instance and claim epoch that made it; the
store wrapper checks each checkpoint as it is written. ``Oracle.violations()`` then says, in words,
every way the run broke a promise of the README.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from uuid import UUID

from tickd.schema import calendars as cal
from tickd.schema import timing
from tickd.schema.model import InstanceKey, Repeat

# A missed-fire policy's start deadline is checked by the node right before it hands the fire to its
# dispatcher: the subscriber sees it later by the node's clock skew (at most 0.5 s) and the delivery's stamp,
# which may read the client's signing keys through a slow store (up to 8 s under faults).
_MISSED_TOLERANCE_S = 10.0
# How long after an acknowledged change a version of an earlier, unacknowledged change may still fire
# (a row loaded just before the fence landed: the hot-write deadline plus the API's guard).
_SETTLE_GRACE_S = 5.0
# A debounced fire is read again once due by its node's clock: a change that landed before that read
# stops it. The fire id's time is in whole milliseconds, and the change's answer is seen a moment after it
# landed: no more than this between them.
_WIRE_TOLERANCE_S = 0.01
# Clocks differ from true time by up to ``WorldConfig.max_skew_s`` (0.5 s): the API's that set a pause's
# until, and the node's that wakes it.
_SKEW_TOLERANCE_S = 1.5


@dataclass(frozen=True, slots=True)
class Delivery:
    at: float  # virtual seconds
    actor: str  # the node incarnation that sent it
    instance: InstanceKey
    epoch: int
    fire_id: str
    event_id: str | None
    schedule_id: UUID
    attempt: int
    ok: bool


@dataclass
class Promise:
    """One acknowledged schedule and what became of the client's later requests."""

    client_id: str
    schedule_id: UUID
    fire_at: datetime  # the nominal time acknowledged last (one-time), or the first occurrence
    events: int = 0  # a batch trigger's events per fire (each delivered under its event id); 0: plain fires
    repeat: Repeat | None = None
    until: datetime | None = None  # recurring: check occurrences before this
    # Recurring: the calendars it names, as they stood at the end (each change only adds exclusions that
    # start after every node reads it): no occurrence they exclude may fire, every other one must.
    calendars: tuple[cal.Calendar, ...] = ()
    # Recurring with a skip or fire_once policy: its runs recorded skipped at the end (epoch ms: reason).
    # A missed occurrence not fired must be one of them.
    skipped: dict[int, str] = field(default_factory=dict)
    cancelled_at: datetime | None = None  # when a cancel was acknowledged (API clock)
    cancelled_t: float | None = None  # the same moment in virtual seconds
    # Fire ids superseded by acknowledged reschedules, with when each was acknowledged (loop time).
    old_fire_ids: dict[str, float] = field(default_factory=dict)
    uncertain: bool = False  # a later change was not acknowledged: either outcome is allowed
    # Fire ids of versions a change not acknowledged may have kept or made (allowed, not required), each
    # until a later change was acknowledged (virtual seconds; None: none yet): not long after that.
    maybe: dict[str, float | None] = field(default_factory=dict)
    # Recurring: pause after this many fires in a row dead-lettered (0: never); and, read from the store
    # at the end, when it was auto-paused (``paused_at``, store clock) and by which fire's dead letter
    # (None: the pause landed but its audit record did not, a node killed in between).
    pause_after: int = 0
    paused_at: datetime | None = None
    paused_by: str | None = None
    pause_notices: int = 0
    # Recurring: timed pauses acknowledged, each (the occurrence it stopped at, until): nothing from that
    # occurrence on goes out before until, and the schedule goes on by itself after it (``poller.wakes``).
    paused_until: list[tuple[datetime, datetime]] = field(default_factory=list)
    # Read at the end for a timed-paused one: its occurrences recorded superseded (epoch ms).
    superseded: set[int] = field(default_factory=set)
    # A debounced by-key schedule (``service.debounce``): a change may land at any time, so a version it
    # superseded (or cancelled) may still arrive, but only one already going out when the change landed.
    debounced: bool = False
    payload: bytes | None = None  # a debounced one's: as its latest acknowledged PUT gave it

    def unsure(self, *fire_ids: str) -> None:
        """A change was not acknowledged: these versions may fire, or not."""
        self.uncertain = True
        for fire_id in fire_ids:
            self.maybe[fire_id] = None

    def settled(self, at: float) -> None:
        """A change was acknowledged at ``at``: the versions in doubt until now must not fire after it."""
        self.uncertain = False
        self.maybe = {k: at if until is None else until for k, until in self.maybe.items()}

    @property
    def fire_id(self) -> str:
        return timing.fire_id(self.schedule_id, self.fire_at)


@dataclass
class Oracle:
    guard_s: float
    start: datetime  # the virtual clock's epoch: virtual seconds are seconds since it
    deliveries: list[Delivery] = field(default_factory=list)
    promises: dict[UUID, Promise] = field(default_factory=dict)
    dead_letters: set[str] = field(default_factory=set)  # fire ids (events: event ids) given up on
    # When each fire (event: event id) was first delivered or given up on, store clock, µs since the epoch.
    completed_us: dict[str, int] = field(default_factory=dict)
    # When each fire (event: event id) was first delivered, store clock, µs since the epoch.
    delivered_us: dict[str, int] = field(default_factory=dict)
    # When each batch trigger's fire was first expanded (its events' write first sent), virtual seconds:
    # its events go out over its window after that, so a version in doubt is judged by this moment.
    expanded_at: dict[str, float] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # violations seen while running
    skews: dict[str, float] = field(default_factory=dict)  # each node incarnation's clock, ahead of true time
    payloads: dict[str, set[bytes]] = field(default_factory=dict)  # debounced fires: payloads delivered
    # Rows left scheduled behind a checkpoint that are stale copies of a fire already completed (see
    # World.left_behind): not a loss, counted so a run can say how often it happened.
    stale_rows: set[str] = field(default_factory=set)
    # Backfills (``schema.backfills``), read from the store at the end: per schedule, the occurrences a
    # backfill wrote a fire for (epoch ms) and that fire's due time; each due before ``backfill_until``
    # must be delivered (or dead-lettered).
    backfilled: dict[UUID, dict[int, datetime]] = field(default_factory=dict)
    backfill_until: datetime | None = None

    def saw(self, problem: str) -> None:
        self.problems.append(problem)

    def violations(self) -> list[str]:
        found = list(self.problems)
        ok = self._ok_deliveries()
        for promise in self.promises.values():
            found += self._check_promise(promise, ok)
        found += self._duplicates()
        return found

    # -- per schedule ---------------------------------------------------------------------------------

    def _ok_deliveries(self) -> dict[UUID, dict[str, list[Delivery]]]:
        """Successful deliveries by schedule id, then by delivery key (event id, else fire id)."""
        out: dict[UUID, dict[str, list[Delivery]]] = defaultdict(lambda: defaultdict(list))
        for d in self.deliveries:
            if d.ok:
                out[d.schedule_id][d.event_id or d.fire_id].append(d)
        return out

    def pending(self) -> int:
        """Keys of acknowledged one-time fires (not cancelled, not in doubt) neither delivered nor given up
        on yet: what ``_check_promise`` would call never delivered if the run ended now."""
        ok = self._ok_deliveries()
        return sum(
            1
            for p in self.promises.values()
            if p.repeat is None and p.cancelled_at is None and not p.uncertain
            for key in _keys(p.fire_id, p.events)
            if not self._done(key, ok.get(p.schedule_id, {}))
        )

    def _done(self, key: str, seen: dict[str, list[Delivery]]) -> bool:
        return key in seen or key in self.dead_letters

    def _check_promise(self, p: Promise, ok: dict[UUID, dict[str, list[Delivery]]]) -> list[str]:
        seen = {k: v for k, v in ok.get(p.schedule_id, {}).items() if not _backfill(k)}
        if p.repeat is not None:
            return self._check_backfills(p, ok.get(p.schedule_id, {})) + self._check_timeline(p, seen)
        # A delivery before the reschedule was acknowledged is allowed: an attempt of it may have been
        # delivered by a node that crashed (or lost its instance) before recording it (seed 74072).
        problems = [
            f"{p.schedule_id}: superseded fire {old} was delivered"
            for old, at in p.old_fire_ids.items()
            if any(d.at >= at and not self._on_the_wire(p, old, d, at) for d in seen.get(old, ()))
        ]
        problems += self._late_maybes(p, seen)
        if p.cancelled_at is not None:
            # A version in doubt (a change of it was not acknowledged) may have fired before the cancel:
            # _late_maybes checks it did not fire after.
            # A delivery before the cancel is allowed: a fire in retry can be cancelled, and an attempt of it
            # may have been delivered by a node that crashed before recording it (seed 65464).
            after = p.cancelled_t if p.cancelled_t is not None else -1.0
            if p.fire_id not in p.maybe and any(
                (k == p.fire_id or k.startswith(p.fire_id + ":"))
                and any(
                    self._fired(p.fire_id, k, d)[1] > after and not self._on_the_wire(p, p.fire_id, d, after)
                    for d in deliveries
                )
                for k, deliveries in seen.items()
            ):
                problems.append(f"{p.schedule_id}: delivered after a cancel acknowledged at {p.cancelled_at}")
            return problems
        if p.uncertain:
            return problems
        for key in _keys(p.fire_id, p.events):
            if not self._done(key, seen):
                problems.append(f"{p.schedule_id}: acknowledged fire {key} (due {p.fire_at}) never delivered")
        if p.payload is not None and p.fire_id in seen and p.payload not in self.payloads.get(p.fire_id, set()):
            # A PUT that replaced a version in place: its fire id delivered, with an older PUT's payload.
            problems.append(f"{p.schedule_id}: fire {p.fire_id} delivered without its latest PUT's payload")
        return problems

    def _check_backfills(self, p: Promise, seen: dict[str, list[Delivery]]) -> list[str]:
        """No occurrence is delivered both by the timeline and by a backfill, and every fire a backfill
        wrote (due in time) is delivered or dead-lettered."""
        problems = []
        written = self.backfilled.get(p.schedule_id, {})
        delivered = {_nominal_ms(k) for k in seen if _backfill(k)}
        if stray := sorted(delivered - set(written)):
            problems.append(f"{p.schedule_id}: backfill fires delivered that no backfill wrote: {stray[:5]}")
        # With a missed-fire policy, a node may record skipped an occurrence a node before it sent and
        # crashed before recording (README, Missed fires); a backfill then fires it again, under its own id.
        missed = p.repeat is not None and p.repeat.missed is not None and p.repeat.missed.applies
        if not missed and (both := sorted(delivered & {_nominal_ms(k) for k in seen if not _backfill(k)})):
            problems.append(f"{p.schedule_id}: occurrences delivered by the timeline and by a backfill: {both[:5]}")
        until = self.backfill_until
        for ms, due in sorted(written.items()):
            key = f"{timing.fire_id(p.schedule_id, timing.from_epoch_ms(ms))}:{timing.BACKFILL_SUFFIX}"
            if until is not None and due < until and not self._done(key, seen):
                problems.append(f"{p.schedule_id}: backfill fire {key} (due {due}) never delivered")
        return problems

    def _on_the_wire(self, p: Promise, fire_id: str, d: Delivery, changed_t: float) -> bool:
        """A debounced fire changed (pushed back, cancelled) at ``changed_t`` (virtual seconds) may still
        arrive as ``d`` if it was already going out then: its node reads the schedule again once it is due
        by the node's own clock, so it read it before the change landed only if it was due by then, as
        that node's clock told it."""
        if not p.debounced:
            return False
        due_t = (_nominal_ms(fire_id) - timing.to_epoch_ms(self.start)) / 1000
        return due_t - self.skews.get(d.actor, 0.0) <= changed_t + _WIRE_TOLERANCE_S

    def _check_timeline(self, p: Promise, seen: dict[str, list[Delivery]]) -> list[str]:
        assert p.repeat is not None and p.until is not None
        expected = _occurrences(p.repeat, p.fire_at, p.until, p.calendars)
        delivered = {_nominal_ms(k) for k in seen}
        problems = []
        if p.cancelled_at is not None:
            limit = p.cancelled_at + timedelta(seconds=self.guard_s)
            late = sorted(ms for ms in delivered if ms > timing.to_epoch_ms(limit))
            if late:
                problems.append(f"{p.schedule_id}: {len(late)} occurrence(s) after the cancel at {p.cancelled_at}")
            return problems
        wanted = {timing.to_epoch_ms(n) for n in expected}
        if stray := sorted(ms for ms in delivered - wanted if ms < timing.to_epoch_ms(p.until)):
            problems.append(f"{p.schedule_id}: occurrences not on its timeline were delivered: {stray[:5]}")
        problems += self._check_missed(p, expected, seen)
        problems += self._check_timed_pauses(p, seen)
        # An occurrence a backfill fired was passed over by the timeline (its run said so before the
        # backfill's outcome replaced it): to the timeline, one recorded skipped.
        passed = set(p.skipped) | set(self.backfilled.get(p.schedule_id, {}))
        fired = [n for n in expected if timing.to_epoch_ms(n) not in passed]  # skipped ones are no fires
        if p.paused_at is not None:
            problems += self._check_auto_pause(p, fired, delivered)
            # Due: the occurrences up to the one whose dead letter paused it (the later ones may have been
            # out already, or not: a paused schedule fires nothing new), except one that was in retry when
            # the pause landed: a pause stops a fire in retry, as a client's does (seed 55: an earlier
            # occurrence's retry, stuck on a write, dropped by its next owner after the pause).
            last = _nominal_ms(p.paused_by) if p.paused_by is not None else self._last_dead_letter(p)
            tried = {d.fire_id for d in self.deliveries if d.schedule_id == p.schedule_id and not d.ok}
            expected = [
                n for n in expected if timing.to_epoch_ms(n) <= last and timing.fire_id(p.schedule_id, n) not in tried
            ]
        if p.uncertain:
            return problems
        # A timed pause stops what has not gone out, as a client's pause does (``_check_auto_pause``): an
        # occurrence before it that was in retry (seed 530051: its retry row's write lost with its node), or
        # not sent yet when its owner lost it (seed 1096: chained, then its node stuck) and recorded
        # superseded by the next owner, which found the schedule paused, need not be delivered.
        stopped = min((a for a, _ in p.paused_until), default=None)
        tried = (
            {d.fire_id for d in self.deliveries if d.schedule_id == p.schedule_id and not d.ok} if stopped else set()
        )
        for nominal in expected:
            if timing.to_epoch_ms(nominal) in passed:
                continue  # recorded skipped: by its missed-fire policy (``_check_missed`` checks when)
            dropped = timing.fire_id(p.schedule_id, nominal) in tried or timing.to_epoch_ms(nominal) in p.superseded
            if stopped is not None and nominal <= stopped and dropped:
                continue
            key = timing.fire_id(p.schedule_id, nominal)
            if not all(self._done(k, seen) for k in _keys(key, p.events)):
                problems.append(f"{p.schedule_id}: occurrence {nominal} skipped (never delivered)")
        return problems

    def _check_missed(self, p: Promise, expected: list[datetime], seen: dict[str, list[Delivery]]) -> list[str]:
        """skip: no occurrence's first attempt goes out past its start deadline. fire_once: one that goes
        out past it is the latest occurrence due by then (no later one was due well before it went out)."""
        missed = p.repeat.missed if p.repeat is not None else None
        if missed is None or not missed.applies:
            return []
        problems = []
        for i, nominal in enumerate(expected):
            firsts = [d.at for d in seen.get(timing.fire_id(p.schedule_id, nominal), ()) if d.attempt == 1]
            if not firsts:
                continue
            sent = min(firsts)
            late_s = sent - (nominal - self.start).total_seconds()
            if late_s <= missed.deadline_s + _MISSED_TOLERANCE_S:
                continue
            if missed.policy == "skip":
                problems.append(
                    f"{p.schedule_id}: occurrence {nominal} went out {late_s:.1f} s late, past its"
                    f" {missed.deadline_s} s start deadline (policy skip)"
                )
            elif i + 1 < len(expected) and (expected[i + 1] - self.start).total_seconds() < sent - _MISSED_TOLERANCE_S:
                problems.append(
                    f"{p.schedule_id}: fire_once sent {nominal} {late_s:.1f} s late though {expected[i + 1]} was"
                    " due before it went out"
                )
        return problems[:3]

    def _check_timed_pauses(self, p: Promise, seen: dict[str, list[Delivery]]) -> list[str]:
        """A timed pause: no occurrence from the one it stopped at goes out before its until (clocks
        skewed both ways: ``_SKEW_TOLERANCE_S``); one without a missed-fire policy has skipped runs only
        where a pause was (a resume records what fell meanwhile, and nothing else skips it)."""
        problems = []
        for stopped, until in p.paused_until:
            ends = (until - self.start).total_seconds() - _SKEW_TOLERANCE_S
            early = sorted(
                (key, min(d.at for d in deliveries))
                for key, deliveries in seen.items()
                if _nominal_ms(key) >= timing.to_epoch_ms(stopped) and min(d.at for d in deliveries) < ends
            )
            if early:
                problems.append(f"{p.schedule_id}: {early[0][0]} went out at t={early[0][1]:.2f}, paused until {until}")
        missed = p.repeat.missed if p.repeat is not None else None
        if p.paused_until and (missed is None or not missed.applies):
            spans = [(timing.to_epoch_ms(a), timing.to_epoch_ms(b)) for a, b in p.paused_until]
            paused = [ms for ms, why in p.skipped.items() if not why.startswith("skipped: calendar")]
            if stray := sorted(ms for ms in paused if not any(a <= ms <= b for a, b in spans)):
                problems.append(f"{p.schedule_id}: occurrences recorded skipped outside its pauses: {stray[:5]}")
        return problems[:3]

    def _last_dead_letter(self, p: Promise) -> int:
        """For a pause whose audit record is missing (its node killed in between): the nominal time (ms) of
        the schedule's last dead-lettered occurrence by the pause, the one that set it off; the pause's own
        time if none is known. Occurrences after it may have been paused before they fired."""
        assert p.paused_at is not None
        paused_ms = timing.to_epoch_ms(p.paused_at)
        prefix = f"{p.schedule_id}:"
        dead = [_nominal_ms(k) for k in self.dead_letters if k.startswith(prefix) and k.count(":") == 1]
        return max((ms for ms in dead if ms <= paused_ms), default=paused_ms)

    def _check_auto_pause(self, p: Promise, expected: list[datetime], delivered: set[int]) -> list[str]:
        """An auto-pause follows ``pause_after`` dead letters in a row, the last one its trigger; after it
        nothing new fires (an occurrence out already may still land, within the guard); it is one
        notice, never two."""
        assert p.paused_at is not None
        problems = []
        if p.pause_after < 1:
            problems.append(f"{p.schedule_id}: paused, but it never asked to be (pause_after_failures 0)")
        if p.paused_by is not None:
            nominals = [timing.to_epoch_ms(n) for n in expected]
            at = nominals.index(_nominal_ms(p.paused_by)) if _nominal_ms(p.paused_by) in nominals else -1
            streak = nominals[at - p.pause_after + 1 : at + 1] if at >= p.pause_after - 1 else []
            keys = [f"{p.schedule_id}:{ms}" for ms in streak]
            if len(keys) != p.pause_after or not all(k in self.dead_letters for k in keys):
                problems.append(
                    f"{p.schedule_id}: auto-paused by {p.paused_by} without {p.pause_after} dead letters in a row"
                )
        limit = timing.to_epoch_ms(p.paused_at + timedelta(seconds=self.guard_s + _SETTLE_GRACE_S))
        if late := sorted(ms for ms in delivered if ms > limit):
            problems.append(f"{p.schedule_id}: {len(late)} occurrence(s) fired after its auto-pause at {p.paused_at}")
        if p.pause_notices > 1:
            problems.append(f"{p.schedule_id}: auto-paused once, notified {p.pause_notices} times")
        return problems

    def _late_maybes(self, p: Promise, seen: dict[str, list[Delivery]]) -> list[str]:
        """A version whose change was not acknowledged may fire, but not once a later change has been
        acknowledged (its fences land with it; a few seconds' grace for a row loaded just before). A
        batch trigger's fire is its expansion: the events of a fire expanded in time go out over its
        window, after the change as well (seed 54851), as an acknowledged fire's events outlive a cancel."""
        late = [
            f"{p.schedule_id}: unacknowledged version {key} {what} at t={at:.2f}, after a later change at t={until:.2f}"
            for maybe, until in p.maybe.items()
            if until is not None
            for key, deliveries in seen.items()
            if key == maybe or key.startswith(maybe + ":")
            for d in deliveries
            for what, at in [self._fired(maybe, key, d)]
            if at > until + _SETTLE_GRACE_S
        ]
        return late[:3]

    def _fired(self, fire_id: str, key: str, delivery: Delivery) -> tuple[str, float]:
        """When the fire behind a delivery happened: an event's, when its fire was expanded."""
        if key != fire_id and (expanded := self.expanded_at.get(fire_id)) is not None:
            return "expanded", expanded
        return "delivered", delivery.at

    # -- across schedules -----------------------------------------------------------------------------

    def _duplicates(self) -> list[str]:
        """A key delivered successfully twice by the same owner (node incarnation and epoch) is a
        duplicate no crash or handover explains."""
        by_owner: dict[tuple[str, str, int], int] = defaultdict(int)
        for d in self.deliveries:
            if d.ok:
                by_owner[(d.event_id or d.fire_id, d.actor, d.epoch)] += 1
        return [
            f"{key} delivered {n} times by {actor} at epoch {epoch}"
            for (key, actor, epoch), n in sorted(by_owner.items())
            if n > 1
        ]


def _keys(fire_id: str, events: int) -> list[str]:
    return [fire_id] if events == 0 else [f"{fire_id}:{i}" for i in range(events)]


def _nominal_ms(key: str) -> int:
    return int(key.split(":")[1])


def _backfill(key: str) -> bool:
    """A backfill's fire id (``<schedule_id>:<nominal ms>:backfill``), not the timeline's."""
    return key.endswith(f":{timing.BACKFILL_SUFFIX}")


def _occurrences(
    repeat: Repeat, first: datetime, until: datetime, calendars: tuple[cal.Calendar, ...] = ()
) -> list[datetime]:
    """The timeline from ``first`` (its first occurrence, acknowledged) up to ``until``, without what
    ``calendars`` exclude (``first`` too, if a calendar changed after it was set)."""
    out: list[datetime] = []
    recurrence = repeat.recurrence()
    nominal, _ = cal.next_allowed(recurrence, first - timedelta(microseconds=1), calendars)
    while nominal is not None and nominal < until:
        out.append(nominal)
        nominal, _ = cal.next_allowed(recurrence, nominal, calendars, fired=len(out))
    return out
