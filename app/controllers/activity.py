"""What PAIR is doing right now, for the tray and the welcome dialog: the number of running jobs,
this computer's engines (and switching them on or off, installing them), and one overall status.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from enum import StrEnum

from PySide6.QtCore import QObject, Signal

from app.broker.connection import BrokerConnection
from app.broker.state import ServiceState
from app.controllers.base import Controller, decode
from app.controllers.subscription import NumberedSubscription
from app.models.errors import ErrorsModel
from backend.protocol import methods
from backend.protocol.errors import RpcError
from backend.protocol.types import (
    EngineStatus,
    InstallProgress,
    JobState,
    WorkloadsEvent,
    WorkloadsSnapshot,
)

log = logging.getLogger(__name__)

ACTIVE_JOB_STATES: frozenset[JobState] = frozenset({"in_flight", "running"})
# Installing downloads an engine (hundreds of MB for Ollama): far beyond a normal call's deadline.
INSTALL_TIMEOUT_S = 1800.0
START_TIMEOUT_S = 120.0
ENGINE_ORDER = ("ollama", "lmstudio", "llamacpp")


class OverallStatus(StrEnum):
    """One word for the tray icon: the service state, refined by jobs and errors while ready."""

    READY = "ready"  # nothing running, nothing wrong
    WORKING = "working"  # at least one job in flight or running
    ERROR = "error"  # the service failed, or an error-severity entry exists
    CONNECTING = "connecting"
    STOPPED = "stopped"  # the service is not running (disconnected)


def overall_status(state: ServiceState, running_jobs: int, has_error: bool) -> OverallStatus:
    """Errors beat work, work beats idle; a service that is not ready says so first."""
    if state is ServiceState.FAILED:
        return OverallStatus.ERROR
    if state is ServiceState.DISCONNECTED:
        return OverallStatus.STOPPED
    if state is ServiceState.CONNECTING:
        return OverallStatus.CONNECTING
    if has_error:
        return OverallStatus.ERROR
    return OverallStatus.WORKING if running_jobs > 0 else OverallStatus.READY


def count_active(states: Mapping[str, JobState]) -> int:
    """Jobs in flight or running."""
    return sum(1 for state in states.values() if state in ACTIVE_JOB_STATES)


def install_text(progress: InstallProgress) -> str:
    """A short line for an install in progress: the stage, with a percentage when measured."""
    if progress.error:
        return f"Install failed: {progress.error}"
    if progress.percent is not None and not progress.done:
        return f"{progress.stage.capitalize()} {progress.percent:.0f}%"
    return progress.stage.capitalize()


def engine_order(engine: EngineStatus) -> tuple[int, str]:
    """Ollama, LM Studio, llama.cpp (the usual first choice first), then others by name."""
    known = (
        ENGINE_ORDER.index(engine.engine) if engine.engine in ENGINE_ORDER else len(ENGINE_ORDER)
    )
    return known, engine.display_name.lower()


def is_on(engine: EngineStatus) -> bool:
    """Whether an engine counts as switched on (running, or on its way)."""
    return engine.state in ("running", "starting")


class ActivityController(Controller):
    """Follows ``workloads:subscribe`` (snapshot, numbered events, re-subscribe on a gap), engine
    states (``engine:status`` per session, ``engine:state-changed``) and error severities.
    Owns the subscription, refresh and command tasks."""

    changed = Signal()

    def __init__(
        self, connection: BrokerConnection, errors: ErrorsModel, parent: QObject | None = None
    ) -> None:
        super().__init__(connection, parent)
        self._errors = errors
        self._jobs: dict[str, JobState] = {}
        self._workloads = NumberedSubscription(
            self._tasks,
            connection,
            methods.WORKLOADS_SUBSCRIBE,
            WorkloadsSnapshot,
            WorkloadsEvent,
            on_snapshot=self._show_jobs,
            on_event=self._apply_job_event,
            params={},
        )
        self._engines: dict[str, EngineStatus] = {}
        self._busy: set[str] = set()  # engines with a command in flight
        self.install_progress: dict[str, str] = {}  # engine -> what its install is doing
        self.engine_errors: dict[str, str] = {}  # engine -> why its last command failed
        connection.state_changed.connect(self._on_connection_state_changed)
        for signal in (errors.rowsInserted, errors.rowsRemoved, errors.modelReset):
            signal.connect(self._on_errors_changed)
        errors.dataChanged.connect(self._on_errors_changed)

    @property
    def running_jobs(self) -> int:
        """Jobs in flight or running right now."""
        return count_active(self._jobs)

    @property
    def jobs_known(self) -> bool:
        """Whether a jobs snapshot was read in this session."""
        return self._workloads.seq is not None

    @property
    def has_error(self) -> bool:
        """Whether an error-severity entry is in the errors registry."""
        return any(error.severity == "error" for error in self._errors.rows())

    @property
    def status(self) -> OverallStatus:
        """The one-word summary for the tray icon."""
        return overall_status(self.connection.state, self.running_jobs, self.has_error)

    @property
    def engines(self) -> list[EngineStatus]:
        """Every engine PAIR knows on this computer, installed or not, by display name."""
        return sorted(self._engines.values(), key=engine_order)

    @property
    def installed_engines(self) -> list[EngineStatus]:
        """The engines found on this computer."""
        return [engine for engine in self.engines if engine.installed]

    def is_busy(self, engine: str) -> bool:
        """Whether a start, stop or install of ``engine`` is in flight."""
        return engine in self._busy

    def set_engine_on(self, engine: str, on: bool) -> None:
        """Start or stop an engine (``engine:start`` / ``engine:stop``)."""
        method = methods.ENGINE_START if on else methods.ENGINE_STOP
        verb = "start" if on else "stop"
        self._engine_command(engine, method, verb, START_TIMEOUT_S)

    def install_engine(self, engine: str) -> None:
        """Install an engine (``engine:install``); progress arrives as pushes."""
        if engine not in self._busy:
            self.install_progress[engine] = "Installing"
        self._engine_command(engine, methods.ENGINE_INSTALL, "install", INSTALL_TIMEOUT_S)

    def detect_engines(self) -> None:
        """Look for engines again (``engine:get-installed``), then read every engine's status."""
        self._tasks.spawn(self._read_engines(detect=True), name="detect-engines")

    def _engine_command(self, engine: str, method: str, verb: str, timeout: float) -> None:
        if engine in self._busy:
            return
        self._busy.add(engine)
        self.engine_errors.pop(engine, None)
        self.changed.emit()
        what = f"{verb} {self._display_name(engine)}"
        self.run_command(self._run_engine_command(engine, method, timeout), what=what)

    async def _run_engine_command(self, engine: str, method: str, timeout: float) -> None:
        try:
            raw = await self.connection.call(method, {"engine": engine}, timeout=timeout)
            status = decode(raw, EngineStatus)
            if status is not None:
                self._engines[status.engine] = status
        except RpcError as exc:
            self.engine_errors[engine] = exc.message
            raise
        finally:
            # A failure reaches the user through command_failed; the view shows the truth again.
            self._busy.discard(engine)
            self.install_progress.pop(engine, None)
            self.changed.emit()

    def _display_name(self, engine: str) -> str:
        known = self._engines.get(engine)
        return known.display_name if known is not None else engine

    def _on_connection_session_ready(self) -> None:
        self._workloads.start()
        self._tasks.spawn(self._read_engines(detect=False), name="engines")

    def _on_connection_session_changed(self) -> None:
        if self.connection.ownership is None:
            self._jobs.clear()
            self._workloads.reset()
            self._engines.clear()
            self._busy.clear()
            self.install_progress.clear()
            self.engine_errors.clear()
            self.changed.emit()

    def _on_connection_state_changed(self, _state: ServiceState) -> None:
        self.changed.emit()

    def _on_errors_changed(self, *_args: object) -> None:
        self.changed.emit()

    def _on_connection_notification_received(self, method: str, params: object) -> None:
        if method == methods.WORKLOADS_EVENT:
            self._workloads.feed(params)
        elif method == methods.ENGINE_STATE_CHANGED:
            status = decode(params, EngineStatus)
            if status is not None:
                self._engines[status.engine] = status
                self.changed.emit()
        elif method == methods.ENGINE_INSTALL_PROGRESS:
            progress = decode(params, InstallProgress)
            if progress is not None and progress.engine in self._busy:
                self.install_progress[progress.engine] = install_text(progress)
                self.changed.emit()

    async def _read_engines(self, *, detect: bool) -> None:
        try:
            if detect:
                await self.connection.call(methods.ENGINE_GET_INSTALLED)
            raw = await self.connection.call(methods.ENGINE_STATUS, {})
        except RpcError as exc:
            log.info("reading the engines failed: %s", exc)
            return
        engines = decode(raw, list[EngineStatus])
        if engines is not None:
            self._engines = {engine.engine: engine for engine in engines}
            self.changed.emit()

    def _show_jobs(self, snapshot: WorkloadsSnapshot) -> None:
        self._jobs = {job.key: job.state for job in snapshot.workloads}
        self.changed.emit()

    def _apply_job_event(self, event: WorkloadsEvent) -> None:
        apply_job_event(self._jobs, event)
        self.changed.emit()


def apply_job_event(jobs: dict[str, JobState], event: WorkloadsEvent) -> None:
    """Apply one ``workloads:event`` to a key → state map."""
    if event.event == "remove" or event.workload is None:
        jobs.pop(event.key, None)
    else:
        jobs[event.key] = event.workload.state
