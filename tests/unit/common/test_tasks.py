"""Owned tasks: named, failures logged, bounded close; wait_first leaves nothing running."""

from __future__ import annotations

import asyncio
import logging

import pytest

from backend.common.tasks import TaskSet, wait_first


async def test_spawned_tasks_are_named_for_their_owner_and_forgotten_when_done() -> None:
    tasks = TaskSet("owner")
    task = tasks.spawn(asyncio.sleep(0), name="nap")
    assert task.get_name() == "owner:nap"
    assert len(tasks) == 1
    await task
    await asyncio.sleep(0)
    assert len(tasks) == 0


async def test_a_failing_task_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    async def fail() -> None:
        raise RuntimeError("boom")

    tasks = TaskSet("owner")
    task = tasks.spawn(fail(), name="failing")
    with caplog.at_level(logging.ERROR), pytest.raises(RuntimeError):
        await task
    await asyncio.sleep(0)
    assert "owner: task owner:failing failed" in caplog.text


async def test_close_cancels_the_others_and_a_task_of_the_set_may_close_it() -> None:
    tasks = TaskSet("owner")
    sleeper = tasks.spawn(asyncio.sleep(60), name="sleeper")

    async def closer() -> str:
        await tasks.close(timeout=1.0)
        return "closed"

    assert await tasks.spawn(closer(), name="closer") == "closed"
    assert sleeper.cancelled()


async def test_close_gives_up_on_a_task_that_ignores_cancellation(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = asyncio.Event()

    async def stubborn() -> None:
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                continue

    tasks = TaskSet("owner")
    task = tasks.spawn(stubborn(), name="stubborn")
    await asyncio.sleep(0)
    with caplog.at_level(logging.WARNING):
        await tasks.close(timeout=0.05)
    assert "did not finish within 0.1 s" in caplog.text
    release.set()
    await task


async def test_wait_first_returns_the_winner_and_cancels_the_rest() -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def slow() -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def fast() -> None:
        await started.wait()

    assert await wait_first(slow(), fast(), name="race") == 1
    assert cancelled.is_set(), "the loser was cancelled and awaited before wait_first returned"
    assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("race:")]


async def test_wait_first_raises_what_the_winner_raised() -> None:
    async def fail() -> None:
        raise ValueError("first")

    with pytest.raises(ValueError, match="first"):
        await wait_first(fail(), asyncio.sleep(60))


def test_spawning_without_a_running_loop_closes_the_coroutine() -> None:
    async def work() -> None:
        raise AssertionError("never runs")

    coro = work()
    with pytest.raises(RuntimeError):
        TaskSet("owner").spawn(coro, name="late")
    assert coro.cr_frame is None, "closed, so it is not reported as never awaited"


def test_spawning_if_running_without_a_loop_starts_nothing_and_closes_the_coroutine() -> None:
    async def work() -> None:
        raise AssertionError("never runs")

    coro = work()
    tasks = TaskSet("owner")
    assert tasks.spawn_if_running(coro, name="late") is None
    assert coro.cr_frame is None
    assert len(tasks) == 0


async def test_spawning_if_running_with_a_loop_is_spawning() -> None:
    async def work() -> int:
        return 7

    tasks = TaskSet("owner")
    task = tasks.spawn_if_running(work(), name="now")
    assert task is not None and task.get_name() == "owner:now"
    assert await task == 7
