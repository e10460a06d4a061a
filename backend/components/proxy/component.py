"""The broker side of the front doors: the listening sockets and the supervised proxy worker."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Callable
from typing import Any

import msgspec

from backend.components.engines.component import EnginesComponent
from backend.components.proxy.listeners import (
    FrontDoor,
    open_front_door,
    port_taken_error_id,
    port_taken_message,
)
from backend.components.proxy.table import LocalEngine
from backend.core.clock import Clock
from backend.core.component import Component
from backend.core.supervisor import ErrorSink
from backend.core.worker import WorkerProcess
from backend.protocol.proxy import DOORS, Door, ProxyTargets
from backend.protocol.types import Ports
from backend.protocol.worker_methods import PROXY_CLOSE_LISTENERS, PROXY_JOB, PROXY_TARGETS

log = logging.getLogger(__name__)

TARGETS_INTERVAL_S = 0.1


class ProxyComponent(Component):
    """Owns the front doors' listening sockets (kept across worker restarts), the proxy worker
    process (via a ``WorkerProcess``) and the loop that sends it the engine targets.

    Ready when the worker answers its first heartbeat. ``close_front_doors()`` is the first
    shutdown stage; ``stop()`` then ends the worker.
    """

    kind = "worker"
    ready_on_start = False

    def __init__(
        self,
        *,
        ports: Ports,
        errors: ErrorSink,
        clock: Clock,
        targets: Callable[[], ProxyTargets],
        host: str = "0.0.0.0",
        environment: Callable[[], dict[str, str]] = dict,
        on_job: Callable[[Any], None] = lambda event: None,
        on_worker_exit: Callable[[], None] = lambda: None,
        heartbeat_interval: float = 1.0,
        targets_interval: float = TARGETS_INTERVAL_S,
    ) -> None:
        super().__init__("proxy")
        self._wanted: dict[Door, int] = {
            "ollama": ports.ollama,
            "openai": ports.openai,
            "llamacpp": ports.llamacpp,
        }
        self._errors = errors
        self._clock = clock
        self._targets = targets
        self._host = host
        self._environment = environment
        self._on_job = on_job
        self._on_worker_exit = on_worker_exit
        self._heartbeat_interval = heartbeat_interval
        self._targets_interval = targets_interval
        self._doors: dict[Door, FrontDoor] = {}
        self._worker: WorkerProcess | None = None

    def endpoints(self) -> dict[Door, str]:
        """The real URL of each open front door."""
        return {door: front_door.url() for door, front_door in self._doors.items()}

    def ports(self) -> dict[Door, int]:
        """The port each open front door is bound to."""
        return {door: front_door.port for door, front_door in self._doors.items()}

    def pid(self) -> int | None:
        """The proxy worker's PID while it runs."""
        return self._worker.pid() if self._worker is not None else None

    async def run(self) -> None:
        """Open the doors once, then run one worker and feed it targets until it exits."""
        if not self._doors:
            self._open_doors()
        worker = self._build_worker()
        self._worker = worker
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(worker.run(), name="proxy:worker")
                group.create_task(self._send_targets(worker), name="proxy:targets")
        except BaseExceptionGroup as group_error:
            raise _first_leaf(group_error) from None
        finally:
            # Whatever the worker held is gone with it: its jobs end, they do not stay Running.
            self._on_worker_exit()

    async def stop(self) -> None:
        """Close the front doors, then end the worker."""
        await self.close_front_doors()
        if self._worker is not None:
            await self._worker.stop()

    async def close_front_doors(self) -> None:
        """Stop accepting connections (worker and broker copies); requests in flight go on."""
        if self._worker is not None:
            self._worker.notify(PROXY_CLOSE_LISTENERS.name)
            await asyncio.sleep(0)
        for front_door in self._doors.values():
            with contextlib.suppress(OSError):
                front_door.sock.close()
        # A later run() (after a restart request) opens them again.
        self._doors = {}

    def _open_doors(self) -> None:
        for door in DOORS:
            front_door = open_front_door(door, self._host, self._wanted[door])
            self._doors[door] = front_door
            if front_door.moved:
                message = port_taken_message(front_door)
                log.warning("%s", message)
                self._errors.raise_error(port_taken_error_id(door), message, severity="warning")
            else:
                self._errors.clear_error(port_taken_error_id(door))

    def _build_worker(self) -> WorkerProcess:
        argv = [sys.executable, "-m", "backend.workers.proxy"]
        for door, front_door in self._doors.items():
            argv += ["--fd", f"{door}={front_door.sock.fileno()}"]
        worker = WorkerProcess(
            "proxy",
            argv,
            clock=self._clock,
            heartbeat_interval=self._heartbeat_interval,
            environment=self._environment,
            on_notification=self._notification,
            pass_fds=[front_door.sock.fileno() for front_door in self._doors.values()],
        )
        worker.bind_ready(self.announce_ready)
        return worker

    def _notification(self, method: str, params: Any) -> None:
        if method == PROXY_JOB.name:
            self._on_job(params)

    async def _send_targets(self, worker: WorkerProcess) -> None:
        sent: ProxyTargets | None = None
        while True:
            current = self._targets()
            if current != sent and worker.pid() is not None:
                worker.notify(PROXY_TARGETS.name, msgspec.to_builtins(current))
                sent = current
            await self._clock.sleep(self._targets_interval)


def local_engines(engines: EnginesComponent) -> dict[str, LocalEngine]:
    """This node's running engines with their last listed models and slot counts."""
    listed = engines.last_models()
    found: dict[str, LocalEngine] = {}
    for name, controller in engines.controllers.items():
        if not controller.running or name not in listed:
            continue
        slots = controller.status().slots or controller.manifest.slots.default
        found[name] = LocalEngine(controller.base_url(), list(listed[name][0] or []), slots)
    return found


def _first_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    first = group.exceptions[0]
    return _first_leaf(first) if isinstance(first, BaseExceptionGroup) else first
