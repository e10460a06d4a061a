"""Runs components and workers, restarts them by the restart policy, and reports crashes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Literal, Protocol

import msgspec

from backend.common.tasks import TaskSet, wait_first
from backend.core.clock import Clock
from backend.core.component import Component, FatalError, NotReadyError
from backend.core.restart_policy import (
    GiveUp,
    RestartPolicy,
    Streak,
    decide_after_exit,
    not_ready_delay,
)
from backend.protocol.types.broker import ComponentInfo, ComponentStatus, ErrorAction, Severity

log = logging.getLogger(__name__)


class ErrorSink(Protocol):
    """Where the supervisor raises and clears its sticky errors."""

    def raise_error(
        self,
        error_id: str,
        message: str,
        *,
        severity: Severity = "error",
        action: ErrorAction | None = None,
    ) -> None:
        """Raise or update a local error."""
        ...

    def clear_error(self, error_id: str) -> None:
        """Clear a local error."""
        ...


class _Outcome(msgspec.Struct, frozen=True):
    kind: Literal["cancelled", "crashed", "fatal", "not-ready"]
    error: str = ""


class _Slot(msgspec.Struct):
    component: Component
    status: ComponentStatus = "starting"
    since: float = 0.0
    restarts: int = 0
    last_error: str | None = None
    next_restart_at: float | None = None
    streak: Streak = msgspec.field(default_factory=Streak)
    wake: asyncio.Event = msgspec.field(default_factory=asyncio.Event)
    run_task: asyncio.Task[_Outcome] | None = None


def crash_error_id(name: str) -> str:
    """The sticky error raised while ``name`` is crashed."""
    return f"supervisor:crashed:{name}"


class Supervisor:
    """Owns one supervision task per component plus the task of each component's current run."""

    def __init__(
        self,
        *,
        errors: ErrorSink,
        clock: Clock,
        policy: RestartPolicy | None = None,
        on_change: Callable[[ComponentInfo], None] = lambda info: None,
    ) -> None:
        self._errors = errors
        self._clock = clock
        self._policy = policy or RestartPolicy()
        self._on_change = on_change
        self._slots: dict[str, _Slot] = {}
        self._tasks = TaskSet("supervisor")
        self._stopping = False
        self._settled = asyncio.Event()

    @property
    def stopping(self) -> bool:
        """True once ``stop()`` was called."""
        return self._stopping

    def add(self, component: Component) -> None:
        """Register a component; it starts when ``start()`` runs (or at once if already started)."""
        if component.name in self._slots:
            raise ValueError(f"component {component.name!r} is already supervised")
        slot = _Slot(component, since=self._clock.wall())
        self._slots[component.name] = slot

    def start(self) -> None:
        """Start supervising every registered component."""
        for slot in self._slots.values():
            self._tasks.spawn(self._supervise(slot), name=slot.component.name)

    async def wait_started(self, timeout: float) -> None:
        """Return once no component is still starting, or after ``timeout`` seconds."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                while any(slot.status == "starting" for slot in self._slots.values()):
                    self._settled.clear()
                    await self._settled.wait()

    def snapshot(self) -> list[ComponentInfo]:
        """Every component's current state, in registration order."""
        return [self._info(slot) for slot in self._slots.values()]

    def restart(self, name: str) -> ComponentInfo:
        """Restart ``name`` now, also after it gave up; raises KeyError for an unknown name."""
        slot = self._slots[name]
        slot.streak = Streak()
        slot.wake.set()
        if slot.run_task is not None and slot.status in ("running", "starting"):
            slot.run_task.cancel()
        return self._info(slot)

    async def stop(self, grace: float = 3.0) -> None:
        """Stop components in reverse order, each within ``grace`` seconds; then end supervision."""
        self._stopping = True
        for slot in reversed(self._slots.values()):
            await self._stop_slot(slot, grace)
        await self._tasks.close(timeout=grace)

    async def _stop_slot(self, slot: _Slot, grace: float) -> None:
        slot.wake.set()
        task = slot.run_task
        if task is None or task.done():
            self._set(slot, "stopped")
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace):
                await slot.component.stop()
                await asyncio.wait([task])
        if not task.done():
            log.warning("%s did not stop within %.1f s; cancelling it", slot.component.name, grace)
            task.cancel()
            await asyncio.wait([task], timeout=grace)
        self._set(slot, "stopped")

    async def _supervise(self, slot: _Slot) -> None:
        not_ready_tries = 0
        while not self._stopping:
            started = self._clock.monotonic()
            outcome = await self._run_once(slot)
            if self.stopping:
                return
            if outcome.kind == "cancelled":
                continue
            restart_at: float | None = None
            if outcome.kind == "not-ready":
                slot.last_error = f"not ready: {outcome.error}"
                self._set(slot, "backoff", next_in=not_ready_delay(self._policy, not_ready_tries))
                not_ready_tries += 1
                restart_at = slot.next_restart_at
            elif outcome.kind == "fatal":
                self._fail(slot, outcome.error, fatal=True)
            else:
                not_ready_tries = 0
                if self._after_crash(slot, outcome.error, self._clock.monotonic() - started):
                    restart_at = slot.next_restart_at
            await self._wait_for_restart(slot, restart_at)

    async def _run_once(self, slot: _Slot) -> _Outcome:
        component = slot.component
        slot.wake.clear()
        self._set(slot, "starting")
        component.bind_ready(lambda: self._on_ready(slot))
        if component.ready_on_start:
            self._on_ready(slot)
        slot.run_task = self._tasks.spawn(
            _outcome_of(component.run()), name=f"{component.name}:run"
        )
        try:
            return await slot.run_task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # we are being cancelled ourselves
            return _Outcome("cancelled")  # only the run was cancelled: restart() or stop()
        finally:
            component.bind_ready(None)

    def _after_crash(self, slot: _Slot, error: str, ran_for: float) -> bool:
        name = slot.component.name
        log.error("%s crashed after %.1f s: %s", name, ran_for, error)
        slot.last_error = error
        slot.streak, decision = decide_after_exit(self._policy, slot.streak, ran_for)
        if isinstance(decision, GiveUp):
            self._fail(slot, error, fatal=False)
            return False
        slot.restarts += 1
        log.warning(
            "%s restarts in %g s (attempt %d of %d)",
            name,
            decision.delay,
            decision.attempt,
            self._policy.max_attempts,
        )
        self._errors.raise_error(
            crash_error_id(name),
            f"{name} crashed ({error}); restarting in {decision.delay:g} s "
            f"(attempt {decision.attempt} of {self._policy.max_attempts})",
            action=ErrorAction(kind="restart-component", label="Restart now", target=name),
        )
        self._set(slot, "backoff", next_in=decision.delay)
        return True

    def _fail(self, slot: _Slot, error: str, *, fatal: bool) -> None:
        name = slot.component.name
        slot.last_error = error
        reason = (
            "cannot run"
            if fatal
            else (f"crashed {self._policy.max_attempts + 1} times in a row and stays down")
        )
        log.error("%s %s: %s", name, reason, error)
        self._errors.raise_error(
            crash_error_id(name),
            f"{name} {reason} ({error})",
            action=ErrorAction(kind="restart-component", label="Start again", target=name),
        )
        self._set(slot, "failed")

    async def _wait_for_restart(self, slot: _Slot, at: float | None) -> None:
        wait = slot.wake.wait()
        if at is None:
            await wait
            return
        delay = max(0.0, at - self._clock.wall())
        name = f"supervisor:{slot.component.name}:backoff"
        await wait_first(self._clock.sleep(delay), wait, name=name)

    def _on_ready(self, slot: _Slot) -> None:
        self._set(slot, "running")
        self._errors.clear_error(crash_error_id(slot.component.name))

    def _set(self, slot: _Slot, status: ComponentStatus, next_in: float | None = None) -> None:
        now = self._clock.wall()
        slot.next_restart_at = None if next_in is None else now + next_in
        if slot.status != status or next_in is not None:
            slot.status = status
            slot.since = now
            self._settled.set()
            self._on_change(self._info(slot))

    def _info(self, slot: _Slot) -> ComponentInfo:
        return ComponentInfo(
            name=slot.component.name,
            kind=slot.component.kind,
            status=slot.status,
            restarts=slot.restarts,
            last_error=slot.last_error,
            next_restart_at=slot.next_restart_at,
            pid=slot.component.pid(),
            since=slot.since,
        )


async def _outcome_of(coro: Coroutine[Any, Any, None]) -> _Outcome:
    """Run a component once and say how it ended; raises only CancelledError."""
    try:
        await coro
    except FatalError as exc:
        return _Outcome("fatal", f"{exc}")
    except NotReadyError as exc:
        return _Outcome("not-ready", f"{exc}")
    except Exception as exc:
        return _Outcome("crashed", f"{type(exc).__name__}: {exc}")
    return _Outcome("crashed", "run() returned unexpectedly")
