"""A fire's attempts (``Try``: number, due and send times, outcome, error; issue 28) as the store keeps them:
on its row (carried by a durable retry, not touched by a write without them), in its run, and in its dead
letter. Their bound (``add_tries``) is the poller's: tests/unit/test_truthful_reports.py."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from tests.contract.conftest import Env, read_all
from tests.contract.test_recurring import chained
from tickd.schema.model import DeadLetter, FireOutcome, Schedule, Status, Try
from tickd.schema.store import Store

Factory = Callable[..., Schedule]


def attempt(env: Env, n: int, outcome: str = "retry", error: str | None = "HTTP 503") -> Try:
    due = env.later(n * 10)
    return Try(n, due, due + (env.later(0.25) - env.later(0)), outcome, error)


async def test_a_retry_row_carries_its_attempts_and_the_outcome_adds_the_last(
    env: Env, store: Store, new_schedule: Factory, client_id: str
) -> None:
    s = new_schedule(env.later(30), poller_id=1)
    await store.create_schedule(s, env.now())
    first = attempt(env, 1)
    retry = await store.requeue_schedule(
        dataclasses.replace(s, tries=(first,)), env.later(60), 1, "HTTP 503", env.now()
    )
    got = await store.get_schedule(client_id, s.schedule_id)
    assert got is not None and got.tries == (first,) == retry.tries
    # The retry's row (its minute may also hold the first row, moved: on Cassandra the two due times, 30 s
    # apart from the real now, can fall in one minute).
    rows = await read_all(store, retry.instance, retry.location.minute)
    assert [r.tries for r in rows if r.location == retry.location] == [(first,)]

    done = (first, attempt(env, 2, "delivered", None))
    outcome = FireOutcome(client_id, s.schedule_id, retry.location, Status.SUCCEEDED, 2, env.later(61), tries=done)
    await store.record_outcomes([outcome])
    got = await store.get_schedule(client_id, s.schedule_id)
    assert got is not None and got.tries == done
    # An outcome that brings no attempts (a fire dropped before it went out) keeps the row's.
    await store.record_outcomes([dataclasses.replace(outcome, status=Status.MOVED, tries=())])
    got = await store.get_schedule(client_id, s.schedule_id)
    assert got is not None and got.tries == done


async def test_a_run_and_a_dead_letter_keep_every_attempt(
    env: Env, store: Store, new_schedule: Factory, client_id: str
) -> None:
    first, _ = await chained(env, new_schedule)
    tries = (attempt(env, 1), attempt(env, 2), attempt(env, 3, "failed", "HTTP 500"))
    fired_at = env.later(30)  # once: on Cassandra the clock is real and moves between two calls
    outcome = FireOutcome(
        client_id, first.schedule_id, first.location, Status.FAILED, 3, fired_at, "HTTP 500",
        nominal_at=first.fire_at, seq=first.seq, tries=tries,
    )  # fmt: skip
    await store.record_outcomes([outcome])
    (run,) = await store.list_runs(client_id, first.schedule_id, None, 10)
    assert run.tries == tries and run.fired_at == fired_at

    letter = DeadLetter(
        client_id, first.schedule_id, first.fire_id, env.later(31), 3, "HTTP 500", first.callback, first.payload,
        tries=tries,
    )  # fmt: skip
    await store.add_dead_letter(letter)
    assert await store.get_dead_letter(client_id, letter.failed_at, letter.schedule_id) == letter
    (listed,) = [
        d for d in await store.list_dead_letters(client_id, letter.failed_at.date()) if d.fire_id == first.fire_id
    ]
    assert listed.tries == tries
