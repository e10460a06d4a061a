"""Owned background tasks: every task has a name, an owner that keeps it, and a bounded join."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")


class TaskSet:
    """Keeps references to the tasks it spawns, logs their failures, and cancels them on close."""

    def __init__(self, owner: str) -> None:
        self._owner = owner
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, T], *, name: str) -> asyncio.Task[T]:
        """Start ``coro`` as a task named ``<owner>:<name>``; without a running loop (a Qt
        signal delivered after the app's loop stopped) ``coro`` is closed and RuntimeError
        raised, so nothing is left never awaited."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            coro.close()
            raise
        task = loop.create_task(coro, name=f"{self._owner}:{name}")
        self._tasks.add(task)
        task.add_done_callback(self._forget)
        return task

    def spawn_if_running(
        self, coro: Coroutine[Any, Any, T], *, name: str
    ) -> asyncio.Task[T] | None:
        """``spawn``, for work a pushed event starts: with no running loop (Qt delivering the
        event while the asyncio loop is stopped, as at the app's exit) ``coro`` is closed and
        None returned, for the caller to try again with the next event."""
        try:
            return self.spawn(coro, name=name)
        except RuntimeError:
            log.debug("%s: %s not started: no running event loop", self._owner, name)
            return None

    def __len__(self) -> int:
        return len(self._tasks)

    async def close(self, timeout: float = 5.0) -> None:
        """Cancel every task and wait for them, at most ``timeout`` seconds.

        A task of this set may close it: it is not cancelled nor waited for (it would wait for
        itself).
        """
        tasks = [task for task in self._tasks if task is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=timeout)
        for task in pending:
            log.warning(
                "%s: task %s did not finish within %.1f s", self._owner, task.get_name(), timeout
            )

    def _forget(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("%s: task %s failed", self._owner, task.get_name(), exc_info=task.exception())


async def wait_first(*coros: Coroutine[Any, Any, Any], name: str = "wait-first") -> int:
    """Run the coroutines until one finishes; cancel and await the others, return the winner's
    index. The winner's exception, if it raised, is raised here.

    The tasks are named ``<name>:<index>`` and never outlive this call.
    """
    loop = asyncio.get_running_loop()
    tasks = [loop.create_task(coro, name=f"{name}:{index}") for index, coro in enumerate(coros)]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        winner = next(index for index, task in enumerate(tasks) if task in done)
        tasks[winner].result()
        return winner
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
