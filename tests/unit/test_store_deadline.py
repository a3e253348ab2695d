"""The store budget of one API request (schema.deadline): its clock starts at the first request, tasks
started inside share it, and once spent nothing more is sent."""

from __future__ import annotations

import asyncio

import pytest

from tickd.schema import deadline
from tickd.schema.errors import StoreUnavailable


async def test_no_budget_leaves_requests_to_the_driver_timeout() -> None:
    assert deadline.left_s("get_ref") is None


async def test_the_clock_starts_at_the_first_request() -> None:
    with deadline.budget(0.3):
        await asyncio.sleep(0.4)  # before any request: a slow body upload is not the store's time
        first = deadline.left_s("get_client")
        assert first is not None and 0.25 < first <= 0.3 + 1e-6
        await asyncio.sleep(0.1)
        second = deadline.left_s("insert_schedule")
        assert second is not None and second < first - 0.05


async def test_a_spent_budget_refuses_the_request_naming_it() -> None:
    with deadline.budget(0.05):
        deadline.left_s("get_client")
        await asyncio.sleep(0.1)
        with pytest.raises(StoreUnavailable, match=r"^batch:insert_schedule: not sent, the 0.05 s"):
            deadline.left_s("batch:insert_schedule")
    assert deadline.left_s("get_client") is None  # the budget ends with its block


async def test_tasks_started_inside_share_the_budget() -> None:
    with deadline.budget(0.2):
        deadline.left_s("reserve_idempotency_key")
        await asyncio.sleep(0.25)

        async def write() -> None:
            deadline.left_s("batch:insert_schedule")

        with pytest.raises(StoreUnavailable):
            await asyncio.create_task(write())


async def test_budgets_of_concurrent_requests_are_their_own() -> None:
    async def request(seconds: float, wait_s: float) -> bool:
        with deadline.budget(seconds):
            deadline.left_s("get_client")
            await asyncio.sleep(wait_s)
            try:
                deadline.left_s("insert_schedule")
            except StoreUnavailable:
                return False
            return True

    assert await asyncio.gather(request(0.05, 0.15), request(1.0, 0.15)) == [False, True]
