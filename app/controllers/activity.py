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
from app.controllers.base import Controller
from app.models.errors import ErrorsModel
from app.pending import BACKEND, call_timeout
from app.stores.engines import EnginesStore
from app.stores.jobs import JobsStore
from backend.protocol import methods
from backend.protocol.contract import Method
from backend.protocol.errors import RpcError
from backend.protocol.types.base import EngineName
from backend.protocol.types.engines import EngineRef, EngineStatus, InstallProgress
from backend.protocol.types.jobs import JobState

log = logging.getLogger(__name__)

ACTIVE_JOB_STATES: frozenset[JobState] = frozenset({"in_flight", "running"})
# Installing downloads an engine (hundreds of MB for Ollama): far beyond a normal call's deadline.
INSTALL_TIMEOUT_S = 1800.0
START_TIMEOUT_S = call_timeout(max(BACKEND.engine_start, BACKEND.engine_stop))
ENGINE_ORDER = ("ollama", "lmstudio", "llamacpp")
EngineMethod = Method[EngineRef, EngineStatus]


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
    """Reads the running jobs from the jobs store, this computer's engines from the engines
    store, and error severities from the errors model; runs engine switches and installs.
    Owns the command and detection tasks."""

    changed = Signal()

    def __init__(
        self,
        connection: BrokerConnection,
        errors: ErrorsModel,
        jobs: JobsStore,
        engines: EnginesStore,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(connection, parent)
        self._errors = errors
        self._jobs = jobs
        self._engines = engines
        self._busy: set[EngineName] = set()  # engines with a command in flight
        self.install_progress: dict[EngineName, str] = {}  # engine -> what its install does
        self.engine_errors: dict[EngineName, str] = {}  # engine -> why its last command failed
        connection.state_changed.connect(self._on_connection_state_changed)
        for signal in (errors.rowsInserted, errors.rowsRemoved, errors.modelReset):
            signal.connect(self._on_errors_changed)
        errors.dataChanged.connect(self._on_errors_changed)
        for store_signal in (
            jobs.reset,
            jobs.cleared,
            jobs.job_changed,
            jobs.job_removed,
            engines.reset,
            engines.cleared,
            engines.engine_changed,
        ):
            store_signal.connect(self._on_store_changed)
        engines.install_progressed.connect(self._on_engines_install_progressed)

    @property
    def running_jobs(self) -> int:
        """Jobs in flight or running right now."""
        return sum(job.state in ACTIVE_JOB_STATES for job in self._jobs.jobs.values())

    @property
    def jobs_known(self) -> bool:
        """Whether a jobs snapshot was read in this session."""
        return self._jobs.loaded

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
        return sorted(self._engines.statuses.values(), key=engine_order)

    @property
    def installed_engines(self) -> list[EngineStatus]:
        """The engines found on this computer."""
        return [engine for engine in self.engines if engine.installed]

    def is_busy(self, engine: EngineName) -> bool:
        """Whether a start, stop or install of ``engine`` is in flight."""
        return engine in self._busy

    def set_engine_on(self, engine: EngineName, on: bool) -> None:
        """Start or stop an engine (``engine:start`` / ``engine:stop``)."""
        method = methods.ENGINE_START if on else methods.ENGINE_STOP
        verb = "start" if on else "stop"
        self._engine_command(engine, method, verb, START_TIMEOUT_S)

    def install_engine(self, engine: EngineName) -> None:
        """Install an engine (``engine:install``); progress arrives through the engines store."""
        if engine not in self._busy:
            self.install_progress[engine] = "Installing"
        self._engine_command(engine, methods.ENGINE_INSTALL, "install", INSTALL_TIMEOUT_S)

    def detect_engines(self) -> None:
        """Look for engines again (``engine:get-installed``); what changes arrives as events."""
        self._tasks.spawn(self._detect_engines(), name="detect-engines")

    def _engine_command(
        self, engine: EngineName, method: EngineMethod, verb: str, timeout: float
    ) -> None:
        if engine in self._busy:
            return
        self._busy.add(engine)
        self.engine_errors.pop(engine, None)
        self.changed.emit()
        what = f"{verb} {self._display_name(engine)}"
        self.run_command(self._run_engine_command(engine, method, timeout), what=what)

    async def _run_engine_command(
        self, engine: EngineName, method: EngineMethod, timeout: float
    ) -> None:
        try:
            # The outcome arrives as engine events before the answer; the answer only ends "busy".
            await self.connection.call(method, EngineRef(engine=engine), timeout=timeout)
        except RpcError as exc:
            self.engine_errors[engine] = exc.message
            raise
        finally:
            # A failure reaches the user through command_failed; the view shows the truth again.
            self._busy.discard(engine)
            self.install_progress.pop(engine, None)
            self.changed.emit()

    def _display_name(self, engine: EngineName) -> str:
        known = self._engines.status(engine)
        return known.display_name if known is not None else engine

    async def _detect_engines(self) -> None:
        try:
            await self.connection.call(methods.ENGINE_GET_INSTALLED)
        except RpcError as exc:
            log.info("detecting the engines failed: %s", exc)

    def _on_connection_session_changed(self) -> None:
        if self.connection.ownership is None:
            self._busy.clear()
            self.install_progress.clear()
            self.engine_errors.clear()
            self.changed.emit()

    def _on_connection_state_changed(self, _state: ServiceState) -> None:
        self.changed.emit()

    def _on_errors_changed(self, *_args: object) -> None:
        self.changed.emit()

    def _on_store_changed(self, *_args: object) -> None:
        self.changed.emit()

    def _on_engines_install_progressed(self, progress: InstallProgress) -> None:
        if progress.engine in self._busy:
            self.install_progress[progress.engine] = install_text(progress)
            self.changed.emit()
