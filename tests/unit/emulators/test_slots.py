"""FIFO slots and request bookkeeping of the engine emulators (no I/O)."""

from __future__ import annotations

import asyncio

import pytest

from backend.devtools.emulators.scheduling import FifoSlots, RequestLog
from tests.fakes import FakeClock


async def test_emulator_slots_serve_waiters_first_come_first_served() -> None:
    slots = FifoSlots(1)
    order: list[int] = []
    await slots.acquire()

    async def worker(number: int) -> None:
        async with slots.slot():
            order.append(number)

    tasks = [asyncio.ensure_future(worker(number)) for number in range(3)]
    await asyncio.sleep(0)
    assert slots.waiting == 3 and slots.busy == 1
    slots.release()
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2] and slots.busy == 0


async def test_emulator_slots_drop_a_cancelled_waiter_without_losing_a_slot() -> None:
    slots = FifoSlots(1)
    await slots.acquire()
    waiter = asyncio.ensure_future(slots.acquire())
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert slots.waiting == 0
    slots.release()
    assert slots.busy == 0
    await slots.acquire()
    assert slots.busy == 1


async def test_emulator_request_log_records_lifecycle_and_counts() -> None:
    clock = FakeClock()
    log = RequestLog(clock)
    done = log.open("m", "/api/generate")
    with log.tracking(done):
        log.started(done, "m:latest")
        log.token(done)
        log.generated(done)
        clock.now += 5
    assert done.state == "done" and done.tokens == 1
    assert done.finished_at is not None and done.finished_at < clock.now
    cancelled = log.open("m", "/api/chat")
    with pytest.raises(asyncio.CancelledError), log.tracking(cancelled):
        raise asyncio.CancelledError
    snapshot = log.snapshot()
    assert (snapshot["completed"], snapshot["cancelled"]) == (1, 1)
    assert [record["state"] for record in snapshot["finished"]] == ["done", "cancelled"]
