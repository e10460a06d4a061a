"""One engine's lifecycle as a frozen value, moved only by the pure ``apply(state, event)``.

Every lifecycle command bumps the revision (subscribers order statuses by it). Observations (an
exit, failed health probes, a crash-restart timer) carry the revision their run began under and
apply only while that run is still the current one: a start, stop or port change ends the run,
so a late observation of it leaves the state unchanged. Commands that leave a running engine
alone (a start of a running engine, an install that finds it) do not end the run, so its
monitors keep watching it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, assert_never

import msgspec
from msgspec.structs import replace

from backend.components.engines.manifest import Manifest
from backend.core.restart_policy import Restart, RestartPolicy, Streak, decide_after_exit
from backend.protocol.types.base import EngineName
from backend.protocol.types.engines import EngineState, EngineStatus

Owner = Literal["nobody", "adopted", "process", "daemon"]
Command = Literal["start", "stop", "restart", "shutdown", "install", "uninstall", "update"]
POLICY = RestartPolicy()


class Lifecycle(msgspec.Struct, frozen=True):
    """What PAIR knows about one engine, apart from the live process handle.

    ``owner`` says who runs what serves the port: ``adopted`` (someone else, so PAIR never stops
    it), ``process`` (a child PAIR spawned, ``pid``) or ``daemon`` (PAIR ran its start commands).
    ``run`` is the revision the current run, or the pending crash-restart, began under.
    """

    state: EngineState = "stopped"
    binary: Path | None = None
    owner: Owner = "nobody"
    pid: int | None = None
    error: str | None = None
    revision: int = 0
    desired: bool | None = None
    slots: int | None = None
    run: int | None = None
    started_at: float = 0.0
    streak: Streak = msgspec.field(default_factory=Streak)
    restart_in: float | None = None

    @property
    def installed(self) -> bool:
        """Whether the executable was found."""
        return self.binary is not None

    @property
    def adopted(self) -> bool:
        """Whether what serves the port was running before PAIR looked."""
        return self.owner == "adopted"

    @property
    def owned(self) -> bool:
        """Whether PAIR started what runs (so PAIR may stop it)."""
        return self.owner in ("process", "daemon")

    @property
    def running(self) -> bool:
        """Whether the engine is serving now."""
        return self.state == "running"


# -- what the controller did, under the engine's lock ------------------------------------------


class Commanded(msgspec.Struct, frozen=True):
    """A lifecycle command took the engine; an explicit start or stop also records the intent."""

    command: Command
    explicit: bool = False


class PortChanged(msgspec.Struct, frozen=True):
    """The engine moves to another port: whatever ran on the old one is no longer observed."""


class Detected(msgspec.Struct, frozen=True):
    """The executable was looked for; ``binary`` is None when it was not found."""

    binary: Path | None


class Adopted(msgspec.Struct, frozen=True):
    """Something already answered on the port, so PAIR serves it without owning it."""

    at: float
    slots: int


class StartBegan(msgspec.Struct, frozen=True):
    """PAIR starts the engine itself (nothing answered on its port)."""


class Spawned(msgspec.Struct, frozen=True):
    """PAIR's child process ``pid`` runs the engine."""

    pid: int


class DaemonLaunched(msgspec.Struct, frozen=True):
    """The daemon's start commands run: what they start is PAIR's to stop."""


class NothingLaunched(msgspec.Struct, frozen=True):
    """No start command could even be run: nothing was started, so PAIR owns nothing."""


class Ready(msgspec.Struct, frozen=True):
    """The engine PAIR started answered its readiness probe at monotonic time ``at``."""

    at: float
    slots: int


class StartFailed(msgspec.Struct, frozen=True):
    """A start was abandoned (what it launched is already stopped)."""

    error: str


class StopBegan(msgspec.Struct, frozen=True):
    """PAIR is stopping what it started."""


class StopFailed(msgspec.Struct, frozen=True):
    """What PAIR started still serves after its stop: it runs on, in a new run watched again."""


class Stopped(msgspec.Struct, frozen=True):
    """Nothing PAIR started runs any more."""


class Crashed(msgspec.Struct, frozen=True):
    """The run failed at ``at`` (after an unhealthy engine was stopped)."""

    error: str
    at: float


# -- observations (fenced by the revision of the run they watched) -----------------------------


class Exited(msgspec.Struct, frozen=True):
    """Process ``pid`` of the run begun under ``revision`` exited on its own at ``at``."""

    revision: int
    pid: int
    error: str
    at: float


class Unhealthy(msgspec.Struct, frozen=True):
    """The run begun under ``revision`` stopped answering health probes."""

    revision: int


class CrashRestartDue(msgspec.Struct, frozen=True):
    """The backoff after the crash of the run begun under ``revision`` is over."""

    revision: int


class SlotsCounted(msgspec.Struct, frozen=True):
    """The engine of the run begun under ``revision`` runs ``slots`` requests at once now: an
    adopted engine may be replaced on its port by another, started with other flags."""

    revision: int
    slots: int


Configuration = Commanded | PortChanged | Detected
Progress = (
    Adopted
    | StartBegan
    | Spawned
    | DaemonLaunched
    | NothingLaunched
    | Ready
    | StartFailed
    | StopBegan
    | StopFailed
    | Stopped
    | Crashed
)
Observation = Exited | Unhealthy | CrashRestartDue | SlotsCounted
Event = Configuration | Progress | Observation


def status_of(manifest: Manifest, state: Lifecycle, backend: str | None = None) -> EngineStatus:
    """The wire status of the engine ``manifest`` describes, in ``state``; ``backend`` is what
    its build computes on, when known."""
    return EngineStatus(
        engine=EngineName(manifest.engine),
        display_name=manifest.display_name,
        front_door=manifest.front_door,
        mode=manifest.runtime.mode,
        installed=state.installed,
        binary=str(state.binary) if state.binary else None,
        state=state.state,
        adopted=state.adopted,
        pid=state.pid,
        port=manifest.runtime.port,
        default_port=manifest.runtime.port,
        desired=state.desired,
        revision=state.revision,
        error=state.error,
        slots=state.slots if state.running else None,
        backend=backend,
    )


def reported_changed(before: Lifecycle, after: Lifecycle) -> bool:
    """Whether subscribers hear of a change: a state the engine reached, not bookkeeping.

    A command alone (a revision bump, a recorded intent) is answered by its RPC reply. Pushed,
    it would show the old state under the new revision, which clients take as its outcome.
    """
    return _reported(before) != _reported(after)


def _reported(state: Lifecycle) -> tuple[object, ...]:
    return (state.state, state.binary, state.owner, state.pid, state.error, state.slots)


def observes(state: Lifecycle, revision: int) -> bool:
    """Whether an observation of the run begun under ``revision`` still applies."""
    return state.run == revision


def apply(state: Lifecycle, event: Event) -> Lifecycle:
    """The state after ``event``; a stale observation returns ``state`` unchanged."""
    if isinstance(event, Observation):
        return _observed(state, event) if observes(state, event.revision) else state
    if isinstance(event, Configuration):
        return _configured(state, event)
    return _progressed(state, event)


def _configured(state: Lifecycle, event: Configuration) -> Lifecycle:
    match event:
        case Commanded(command=command, explicit=explicit):
            bumped = _bumped(state)
            if explicit and command in ("start", "stop"):
                return replace(bumped, desired=command == "start")
            return bumped
        case PortChanged():
            return _ended(_bumped(state))
        case Detected(binary=binary):
            return _detected(state, binary)
    assert_never(event)


def _progressed(state: Lifecycle, event: Progress) -> Lifecycle:
    match event:
        case Adopted(at=at, slots=slots):
            return _running(replace(state, owner="adopted", pid=None, error=None), at, slots)
        case StartBegan():
            return replace(_ended(state), owner="nobody", pid=None, error=None, state="starting")
        case Spawned(pid=pid):
            return replace(state, owner="process", pid=pid)
        case DaemonLaunched():
            return replace(state, owner="daemon")
        case NothingLaunched():
            return replace(state, owner="nobody", pid=None)
        case Ready(at=at, slots=slots):
            return _running(state, at, slots)
        case StartFailed(error=error):
            return replace(_let_go(state), state="error", error=error)
        case StopBegan():
            return replace(_ended(state), state="stopping")
        case StopFailed():
            return replace(state, state="running", error=None, run=state.revision)
        case Stopped():
            return _let_go(state)
        case Crashed(error=error, at=at):
            return _crashed(state, error, at)
    assert_never(event)


def _observed(state: Lifecycle, event: Observation) -> Lifecycle:
    match event:
        case Exited(pid=pid, error=error, at=at):
            # Only the process of this run can crash it; another pid is one already replaced.
            return _crashed(_bumped(state), error, at) if pid == state.pid else state
        case Unhealthy():
            bumped = _ended(_bumped(state))
            # An adopted engine that went silent is simply gone; an owned one is stopped
            # next and then recorded as crashed.
            return _let_go(bumped) if state.adopted else bumped
        case CrashRestartDue():
            return _ended(_bumped(state)) if state.desired is True else state
        case SlotsCounted(slots=slots):
            return replace(state, slots=slots) if state.running else state
    assert_never(event)


def _bumped(state: Lifecycle) -> Lifecycle:
    return replace(state, revision=state.revision + 1)


def _ended(state: Lifecycle) -> Lifecycle:
    """No run is observed any more (and no crash-restart is pending)."""
    return replace(state, run=None, restart_in=None)


def _let_go(state: Lifecycle) -> Lifecycle:
    """Nothing runs: PAIR owns nothing and the engine is stopped (or not installed)."""
    return replace(
        _ended(state), owner="nobody", pid=None, error=None, slots=None, state=_idle(state)
    )


def _idle(state: Lifecycle) -> EngineState:
    return "stopped" if state.installed else "not-installed"


def _detected(state: Lifecycle, binary: Path | None) -> Lifecycle:
    found = replace(state, binary=binary)
    if binary is None and state.state == "stopped":
        return replace(found, state="not-installed")
    if binary is not None and state.state == "not-installed":
        return replace(found, state="stopped")
    return found


def _running(state: Lifecycle, at: float, slots: int) -> Lifecycle:
    # A start long after the previous one begins a new streak of crash-restarts.
    fresh = at - state.started_at > POLICY.healthy_reset
    return replace(
        state,
        state="running",
        slots=slots,
        run=state.revision,
        restart_in=None,
        started_at=at,
        streak=Streak() if fresh else state.streak,
    )


def _crashed(state: Lifecycle, error: str, at: float) -> Lifecycle:
    streak, decision = decide_after_exit(POLICY, state.streak, at - state.started_at)
    # Only an engine the user wants running comes back on its own.
    delay = decision.delay if isinstance(decision, Restart) and state.desired is True else None
    return replace(
        state,
        state="error",
        error=error,
        owner="nobody",
        pid=None,
        streak=streak,
        run=state.revision if delay is not None else None,
        restart_in=delay,
    )
