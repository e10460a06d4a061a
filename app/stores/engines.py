"""This node's engines (``engine:subscribe``): their states, the models they list and load, the
pulls and installs in progress and their schedulers, shared by the Engines, Models and Overview
pages, the tray, the welcome dialog and the Endpoints window."""

from __future__ import annotations

from collections.abc import Mapping

from PySide6.QtCore import QObject, Signal

from app.broker.connection import BrokerConnection
from app.stores.base import StreamStore
from backend.protocol import methods
from backend.protocol.contract import NoParams
from backend.protocol.types.base import EngineName, NodeId
from backend.protocol.types.engines import (
    EngineEvent,
    EngineModels,
    EngineModelsChanged,
    EngineSchedulerChanged,
    EnginesSnapshot,
    EngineStateChanged,
    EngineStatus,
    InstallProgress,
    InstallProgressed,
    MemberEngines,
    MemberEnginesChanged,
    MemberEnginesLeft,
    PullProgress,
    PullProgressed,
)
from backend.protocol.types.scheduler import SchedulerState, SchedulerStates

PullKey = tuple[EngineName, str]  # (engine, model)


class EnginesStore(StreamStore[NoParams, EnginesSnapshot, EngineEvent]):
    """Engine statuses by name, the last model lists, and the pulls and installs still running.
    ``engine_changed`` names an engine whose status changed, ``models_changed`` follows a new
    model list, ``pull_progressed`` and ``install_progressed`` carry each progress step (the
    last one has ``done``); ``member_changed`` names another member whose engines, models or
    link changed (``members``); ``scheduler_changed`` follows new schedulers of this node's
    engines (``scheduler``); ``reset`` after every snapshot."""

    engine_changed = Signal(str)  # EngineName
    models_changed = Signal()
    pull_progressed = Signal(object)  # PullProgress
    install_progressed = Signal(object)  # InstallProgress
    member_changed = Signal(str)  # NodeId
    scheduler_changed = Signal()

    def __init__(self, connection: BrokerConnection, parent: QObject | None = None) -> None:
        super().__init__(connection, methods.ENGINE_SUBSCRIBE, methods.ENGINE_EVENT, None, parent)
        self._statuses: dict[EngineName, EngineStatus] = {}
        self._models: EngineModels | None = None
        self._pulls: dict[PullKey, PullProgress] = {}
        self._installs: dict[EngineName, InstallProgress] = {}
        self._members: dict[NodeId, MemberEngines] = {}
        self._schedulers: dict[EngineName, SchedulerState] = {}

    @property
    def members(self) -> Mapping[NodeId, MemberEngines]:
        """Every other member's engines as its link last told this node (read-only)."""
        return self._members

    @property
    def statuses(self) -> Mapping[EngineName, EngineStatus]:
        """Every engine PAIR knows on this node, installed or not (read-only)."""
        return self._statuses

    def status(self, engine: EngineName) -> EngineStatus | None:
        """One engine's status, if known."""
        return self._statuses.get(engine)

    @property
    def models(self) -> EngineModels | None:
        """The running engines' last model lists; None until a snapshot arrived."""
        return self._models

    @property
    def pulls(self) -> Mapping[PullKey, PullProgress]:
        """Downloads in progress by (engine, model), their last step each."""
        return self._pulls

    @property
    def installs(self) -> Mapping[EngineName, InstallProgress]:
        """Installs in progress by engine, their last step each."""
        return self._installs

    def scheduler(self, engine: EngineName) -> SchedulerState | None:
        """This node's engine's scheduler; None while it has seen no work (or an older broker
        reports none)."""
        return self._schedulers.get(engine)

    def _load(self, snapshot: EnginesSnapshot) -> None:
        self._statuses = {status.engine: status for status in snapshot.engines}
        self._models = snapshot.models
        self._pulls = {(pull.engine, pull.model): pull for pull in snapshot.pulls}
        self._installs = {install.engine: install for install in snapshot.installs}
        self._members = {member.node_id: member for member in snapshot.members}
        self._schedulers = _by_engine(snapshot.scheduler)

    def _apply(self, event: EngineEvent) -> None:
        match event:
            case EngineStateChanged(status=status):
                self._statuses[status.engine] = status
                self.engine_changed.emit(status.engine)
            case EngineModelsChanged(models=models):
                self._models = models
                self.models_changed.emit()
            case PullProgressed(progress=pull):
                if pull.done:
                    self._pulls.pop((pull.engine, pull.model), None)
                else:
                    self._pulls[(pull.engine, pull.model)] = pull
                self.pull_progressed.emit(pull)
            case InstallProgressed(progress=install):
                if install.done:
                    self._installs.pop(install.engine, None)
                else:
                    self._installs[install.engine] = install
                self.install_progressed.emit(install)
            case MemberEnginesChanged(member=member):
                self._members[member.node_id] = member
                self.member_changed.emit(member.node_id)
            case MemberEnginesLeft(node_id=node_id):
                if self._members.pop(node_id, None) is not None:
                    self.member_changed.emit(node_id)
            case EngineSchedulerChanged(scheduler=scheduler):
                self._schedulers = _by_engine(scheduler)
                self.scheduler_changed.emit()

    def _forget(self) -> None:
        self._statuses, self._models = {}, None
        self._pulls, self._installs = {}, {}
        self._members = {}
        self._schedulers = {}


def _by_engine(states: SchedulerStates | None) -> dict[EngineName, SchedulerState]:
    return {state.engine: state for state in states.engines} if states is not None else {}
