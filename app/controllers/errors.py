"""Keeps ``ErrorsModel`` equal to the broker's errors registry (this node's errors and every
other member's, tagged with its node) and runs the errors' actions; names the member an error
belongs to (from the engines store, else the discovery store)."""

from __future__ import annotations

import logging

from PySide6.QtCore import QObject, Signal

from app.broker.connection import BrokerConnection
from app.controllers.base import Controller, decode_push
from app.controllers.components import ComponentsController
from app.models.errors import ErrorsModel, Problem, banner_errors, banner_text, problems
from app.pending import BACKEND, call_timeout
from app.stores.discovery import DiscoveryStore
from app.stores.engines import EnginesStore
from backend.protocol import methods
from backend.protocol.errors import RpcError
from backend.protocol.types.base import EngineName, NodeId
from backend.protocol.types.broker import ErrorClear, ServiceError
from backend.protocol.types.engines import EngineRef

log = logging.getLogger(__name__)
ENGINE_START_TIMEOUT_S = call_timeout(BACKEND.engine_start)  # readiness can take minutes
# Actions that act on this node whatever error offers them: not offered for another member's.
_HERE_ONLY = frozenset({"restart-component", "open-settings"})


class ErrorsController(Controller):
    """Reads ``errors:get-initial`` per session and applies ``errors:update`` snapshots as row
    changes. Member names come from ``engines`` and ``discovery`` when given (without them
    every error reads as this node's). Owns the read task."""

    open_settings_requested = Signal()
    names_changed = Signal()  # a member's name became known or changed

    def __init__(
        self,
        connection: BrokerConnection,
        model: ErrorsModel,
        components: ComponentsController,
        parent: QObject | None = None,
        *,
        engines: EnginesStore | None = None,
        discovery: DiscoveryStore | None = None,
    ) -> None:
        super().__init__(connection, parent)
        self.model = model
        self._components = components
        self._engines = engines
        self._discovery = discovery
        self._updates = 0  # pushes seen: a push newer than an in-flight read wins
        self._names: dict[NodeId, str] = {}  # the members' names as last shown
        if engines is not None:
            for signal in (engines.reset, engines.cleared, engines.member_changed):
                signal.connect(self._on_engines_members_changed)
        if discovery is not None:
            for signal in (discovery.reset, discovery.node_changed, discovery.node_removed):
                signal.connect(self._on_discovery_changed)

    def node_name(self, node_id: NodeId) -> str | None:
        """Another member's name (the start of its id when not known); None for this node."""
        member = self._engines.members.get(node_id) if self._engines is not None else None
        if member is not None:
            return member.name
        discovery = self._discovery
        if discovery is None or discovery.self_id in (None, node_id):
            return None
        node = discovery.node(node_id)
        return node.name if node is not None else node_id[:8]

    def banner_errors(self) -> list[ServiceError]:
        """The errors the banners show: this computer's first, one line per member away."""
        return banner_errors(self.model.rows(), lambda node: self.node_name(node) is not None)

    def banner_text(self, error: ServiceError) -> str:
        """The banner's message: another member's starts with its name."""
        return banner_text(error, self.node_name(error.node_id))

    def banner_problems(self) -> list[Problem]:
        """What the banners show: one per problem, naming every computer that reports it."""
        return problems(self.banner_errors(), self.node_name)

    def dismiss_problem(self, problem: Problem) -> None:
        """Clear every report of ``problem``, each on its own computer."""
        for error in problem.errors:
            self.dismiss(error)

    def run_problem_action(self, problem: Problem) -> None:
        """Do the problem's action on every computer that reports it and offers it."""
        for error in problem.errors:
            if self.offers_action(error):
                self.run_action(error)

    def offers_action(self, error: ServiceError) -> bool:
        """Whether the banner offers the error's own action (besides Dismiss)."""
        action = error.action
        if action is None or action.kind == "dismiss":
            return False
        return action.kind not in _HERE_ONLY or self.node_name(error.node_id) is None

    def dismiss(self, error: ServiceError) -> None:
        """Clear an error (a later report brings it back); another member's is cleared on that
        member (the broker forwards it)."""
        call = self.connection.call(
            methods.ERRORS_CLEAR, ErrorClear(id=error.id, node_id=error.node_id)
        )
        self.run_command(call, what="dismiss the message")

    def run_action(self, error: ServiceError) -> None:
        """Do what the error's action offers (on the node the error belongs to)."""
        action = error.action
        if action is None or action.kind == "dismiss":
            self.dismiss(error)
        elif not self.offers_action(error):
            log.info("%s of %s is not run from another computer", action.kind, error.node_id)
        elif action.kind == "restart-component" and action.target:
            self._components.restart_component(action.target)
        elif action.kind == "open-settings":
            self.open_settings_requested.emit()
        elif action.kind == "retry" and action.target and error.id.startswith("engine:"):
            # An engine that failed to start or crashed: starting it again is the retry; a
            # successful start clears the error on the broker's side.
            other = self.node_name(error.node_id) is not None
            params = EngineRef(
                engine=EngineName(action.target), node=error.node_id if other else None
            )
            call = self.connection.call(
                methods.ENGINE_START, params, timeout=ENGINE_START_TIMEOUT_S
            )
            self.run_command(call, what=f"start {action.target}")
        else:
            # Other retries have no generic meaning: the owning component retries by itself.
            log.info("no handler for error action %s", action.kind)

    def _on_connection_session_ready(self) -> None:
        self._tasks.spawn(self._read_initial(self._updates), name="get-initial")

    def _on_connection_session_changed(self) -> None:
        if self.connection.ownership is None:
            self.model.sync([])

    def _on_connection_notification_received(self, method: str, params: object) -> None:
        if method != methods.ERRORS_UPDATE.name:
            return
        errors = decode_push(methods.ERRORS_UPDATE, params)
        if errors is not None:
            self._updates += 1
            self.model.sync(errors)

    def _on_engines_members_changed(self, *_args: object) -> None:
        engines = self._engines
        names = {m.node_id: m.name for m in engines.members.values()} if engines else {}
        if names != self._names:  # a member's pull or model change: nothing to rename
            self._names = names
            self.names_changed.emit()

    def _on_discovery_changed(self, *_args: object) -> None:
        self.names_changed.emit()

    async def _read_initial(self, updates_before: int) -> None:
        try:
            errors = await self.connection.call(methods.ERRORS_GET_INITIAL)
        except RpcError as exc:
            log.info("errors:get-initial failed: %s", exc)
            return
        if self._updates == updates_before:
            self.model.sync(errors)
