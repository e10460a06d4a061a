"""Loads a llama.cpp model spread over the members the user chose (``engine:action``
``load_model`` with ``across``) and says how the broker answered: the model runs, or the
broker's reason it cannot (the planner's refusals are plain sentences, shown as they are)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import msgspec
from PySide6.QtCore import QObject, Signal

from app.controllers.models import RPC_TIMEOUTS_S, ModelsController
from app.models.models import LOADING
from app.pending import COLD_LOAD_TIMEOUT_S, PendingKey
from backend.protocol import methods
from backend.protocol.errors import RpcError
from backend.protocol.types.base import NodeId
from backend.protocol.types.engines import EngineActionParams

log = logging.getLogger(__name__)

NONE_CHOSEN = "Tick at least one member to spread the model over."
NOT_RUNNING = "The PAIR service is not running."


class SpreadCandidate(msgspec.Struct, frozen=True):
    """A member that could take a share: its node id, name, and whether its link is up."""

    node: NodeId
    name: str
    reachable: bool


class SpreadLoader(QObject):
    """Sends spread loads for the Models page; its calls run on ``models``' tasks (closed with
    it), and the row shows "Loading…" from the shared pending store until the answer."""

    # PendingKey, then "" when the model runs, else the broker's reason as it gave it.
    answered = Signal(object, str)

    def __init__(self, models: ModelsController, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._models = models

    def candidates(self, key: PendingKey) -> list[SpreadCandidate]:
        """The members besides the computer that runs ``key``'s model, by name."""
        members = [m for m in self._models.engines.members.values() if m.node_id != key.node]
        members.sort(key=lambda member: (member.name.casefold(), member.node_id))
        return [SpreadCandidate(m.node_id, m.name, m.reachable) for m in members]

    def load_across(self, key: PendingKey, across: Sequence[str]) -> str | None:
        """Ask the broker to load ``key``'s model spread over ``across`` (node ids) as well as
        the computer that has it; the reason it was not asked, or None once it was."""
        if not across:
            return NONE_CHOSEN
        if not self._models.reachable(key.node):
            return NOT_RUNNING
        pending = self._models.pending.action(key)
        if pending is not None:
            return f"{pending}… wait until it finishes."
        self._models.pending.begin(key, LOADING, COLD_LOAD_TIMEOUT_S)
        self._models.run_command(self._load(key, list(across)), what=f"spread {key.model}")
        return None

    async def _load(self, key: PendingKey, across: list[str]) -> None:
        node = None if key.node == self._models.node_id else key.node
        params = EngineActionParams(
            engine=key.engine, action="load_model", model=key.model, node=node, across=across
        )
        try:
            await self._models.connection.call(
                methods.ENGINE_ACTION, params, RPC_TIMEOUTS_S["load_model"]
            )
        except RpcError as exc:
            log.warning("spread load of %s over %s failed: %s", key.model, across, exc)
            self._models.pending.settle(key)
            self.answered.emit(key, exc.message or "the broker gave no reason")
            return
        self._models.pending.settle(key)
        self.answered.emit(key, "")
