"""The Models page's Qt models: models per node and engine, pulls in progress, the hub catalogue.

Rows are the broker's truth (the engines store for this node and the other cluster members,
discovery for computers outside the cluster); what the user just asked for is overlaid from
the shared ``PendingActions`` store, so a pending change repaints one row and never touches
the rows themselves.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable
from typing import Literal

import msgspec
from msgspec.structs import replace
from PySide6.QtCore import QAbstractItemModel, QObject, QSortFilterProxyModel
from PySide6.QtGui import QColor

from app.catalog import format_size
from app.models.keyed_table import ROW_ROLE, Column, KeyedTableModel, ModelIndex
from app.models.model_details import details_text, details_tip
from app.models.replica_text import replica_mark_text, replica_mark_tooltip
from app.models.spread import spread_status_text, spread_tip
from app.pending import PendingActions, PendingKey
from app.window.look import State, state_colour
from backend.protocol.types.base import EngineName, NodeId
from backend.protocol.types.engines import (
    EngineModels,
    EngineStatus,
    MemberEngines,
    ModelDetails,
    ReplicaMark,
    SpreadStatus,
)
from backend.protocol.types.nodes import DiscoveredNode

ModelAction = Literal["load_model", "unload_model", "delete_model", "pull_model"]
MODEL_ACTIONS: frozenset[ModelAction] = frozenset(
    ("load_model", "unload_model", "delete_model", "pull_model")
)
# What the bundled manifests can do with models. An engine not listed here gets every action
# and the broker's answer decides (it names the action the engine lacks).
_ENGINE_ACTIONS: dict[str, frozenset[ModelAction]] = {
    "ollama": MODEL_ACTIONS,
    "lmstudio": MODEL_ACTIONS,
    # One model at a time and no eject of its own: loading switches the model it serves.
    "llamacpp": frozenset(("load_model", "delete_model", "pull_model")),
}
# The engines that serve exactly one model: Load replaces it, and the served one cannot be
# deleted (the broker refuses and says why).
_SINGLE_MODEL: frozenset[str] = frozenset({"llamacpp"})
# The engines whose manifest restarts them after a model is deleted (``restart_after`` of
# ``delete_model``: LM Studio serves its models from an index built at start). The broker does
# the restart; the app only warns first and waits longer. A test keeps this equal to the manifests.
_RESTART_AFTER_DELETE: frozenset[str] = frozenset({"lmstudio"})
ENGINE_TITLES = {"ollama": "Ollama", "lmstudio": "LM Studio", "llamacpp": "llama.cpp"}
ENGINE_ORDER = ("ollama", "lmstudio", "llamacpp")  # how engines are listed; others follow by id

LOADING, EJECTING, DELETING, PULLING = "Loading", "Ejecting", "Deleting", "Pulling"
REMOTE_SIZE_TIP = "Other computers do not share model sizes yet."


def on_any_change(model: QAbstractItemModel, slot: Callable[..., None]) -> None:
    """Call ``slot`` whenever ``model``'s rows appear, go, change or are reset."""
    for signal in (
        model.rowsInserted,
        model.rowsRemoved,
        model.dataChanged,
        model.modelReset,
        model.layoutChanged,
    ):
        signal.connect(slot)


def engine_title(engine: str) -> str:
    """The engine's display name (its id when unknown)."""
    return ENGINE_TITLES.get(engine, engine)


def engine_order(engine: str) -> tuple[int, str]:
    """A sort key: the bundled engines in their usual order, then the rest by id."""
    known = ENGINE_ORDER.index(engine) if engine in ENGINE_ORDER else len(ENGINE_ORDER)
    return (known, engine)


def restarts_after_delete(engine: str) -> bool:
    """Whether deleting a model of ``engine`` restarts it (interrupting what it serves)."""
    return engine in _RESTART_AFTER_DELETE


def supports(engine: str, action: ModelAction) -> bool:
    """Whether ``engine`` can run ``action`` on a model."""
    return action in _ENGINE_ACTIONS.get(engine, MODEL_ACTIONS)


def serves_one_model(engine: str) -> bool:
    """Whether ``engine`` serves one model at a time (loading another replaces it)."""
    return engine in _SINGLE_MODEL


def same_model(engine: str, first: str, second: str) -> bool:
    """Whether two names mean one model: Ollama lists an untagged name as ``name:latest``."""
    if first == second:
        return True
    if engine != "ollama":
        return False
    return _with_tag(first) == _with_tag(second)


def _with_tag(name: str) -> str:
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"


class ModelRow(msgspec.Struct, frozen=True):
    """One model on one node's engine; rows of this node (``local``) and of the other members
    (``member``) can be acted on, a member's only while it can be ``reachable``. ``details``
    is what the model file says about itself, where its engine reads it (llama.cpp); ``spread``
    which members hold which share of a model the engine runs spread over them; ``replica``
    the mark of a model PAIR's replica planner loaded (unloaded again once idle)."""

    key: PendingKey
    node_name: str
    loaded: bool
    local: bool
    reachable: bool = True
    size_bytes: int | None = None  # None when the engine does not report it
    member: bool = False
    details: ModelDetails | None = None
    spread: SpreadStatus | None = None
    replica: ReplicaMark | None = None

    @property
    def managed(self) -> bool:
        """This node's model or another member's: load, eject and delete apply."""
        return self.local or self.member

    @property
    def where(self) -> str:
        """The computer in a sentence: "this computer" or its name."""
        return "this computer" if self.local else self.node_name

    @property
    def engine(self) -> EngineName:
        """The engine's id."""
        return self.key.engine

    @property
    def model(self) -> str:
        """The model's name as its engine lists it."""
        return self.key.model

    def sort_key(self) -> tuple[bool, str, int, str, str]:
        """This node first, then by node name, engine and model."""
        node = (not self.local, self.node_name.casefold())
        return (*node, *engine_order(self.engine), self.model.casefold())


def listed_engines(
    models: EngineModels | None, statuses: Iterable[EngineStatus]
) -> set[EngineName]:
    """Engines with a model list, less those known not to be running (they serve nothing;
    their list comes back when they run again). An engine that serves one model of files PAIR
    keeps (llama.cpp) keeps its list in any state: the broker lists its files whenever it is
    installed, a switch restarts it, and loading a file starts it."""
    listed = set(models.by_engine) if models is not None else set()
    states = {status.engine: status.state for status in statuses}
    return {
        name
        for name in listed
        if states.get(name, "running") == "running" or serves_one_model(name)
    }


def local_rows(
    node_id: NodeId,
    node_name: str,
    models: EngineModels,
    engines: Collection[EngineName],
    *,
    member: bool = False,
    reachable: bool = True,
) -> list[ModelRow]:
    """The rows of ``engines`` from a model list of this node (or, ``member``, of another
    member)."""
    rows = []
    for engine, names in models.by_engine.items():
        if engine not in engines:
            continue
        loaded = set(models.loaded_by_engine.get(engine, []))
        sizes = models.sizes_by_engine.get(engine, {})
        details = models.details_by_engine.get(engine, {})
        replicas = models.replicas_by_engine.get(engine, {})
        for name in names:
            key = PendingKey(node_id, engine, name)
            row = ModelRow(key, node_name, name in loaded, not member, reachable, sizes.get(name))
            mark = replicas.get(name) if name in loaded else None
            rows.append(replace(row, member=member, details=details.get(name), replica=mark))
    return rows


def with_spread(rows: list[ModelRow], statuses: Iterable[EngineStatus]) -> list[ModelRow]:
    """``rows`` with each engine's spread (from its status) on the row of the model it runs."""
    spreads = {status.engine: status.spread for status in statuses if status.spread is not None}
    return [
        replace(row, spread=spread)
        if (spread := spreads.get(row.engine)) is not None
        and same_model(row.engine, row.model, spread.model)
        else row
        for row in rows
    ]


def member_rows(member: MemberEngines) -> list[ModelRow]:
    """Another member's rows from its last model list (as last seen while it is away)."""
    if member.models is None:
        return []
    engines = listed_engines(member.models, member.engines)
    return local_rows(
        member.node_id,
        member.name,
        member.models,
        engines,
        member=True,
        reachable=member.reachable,
    )


def remote_rows(node: DiscoveredNode) -> list[ModelRow]:
    """Rows of a computer outside the cluster from discovery: read-only."""
    rows = []
    for engine, lists in node.engines.items():
        loaded = set(lists.loaded or [])
        for name in lists.models or []:
            key = PendingKey(node.node_id, EngineName(engine), name)
            rows.append(ModelRow(key, node.name, name in loaded, False, node.reachable))
    return rows


def expectation_met(action: str, row: ModelRow | None) -> bool:
    """Whether a model list shows what the pending ``action`` asked for (None: not listed)."""
    if action == LOADING:
        return row is not None and row.loaded
    if action == EJECTING:
        return row is not None and not row.loaded
    if action == DELETING:
        return row is None
    if action == PULLING:
        return row is not None
    return False


class ModelsModel(KeyedTableModel[PendingKey, ModelRow]):
    """Models keyed by (node, engine, model): computer, engine, model, size, details, status,
    actions."""

    DETAILS_COLUMN = 4
    STATUS_COLUMN = 5
    ACTIONS_COLUMN = 6

    def __init__(
        self,
        pending: PendingActions,
        parent: QObject | None = None,
        now: Callable[[], float] = time.time,
    ) -> None:
        columns: tuple[Column[ModelRow], ...] = (
            Column("Computer", self._computer, tooltip=self._computer_tip),
            Column("Engine", lambda row: engine_title(row.engine)),
            Column("Model", lambda row: row.model, tooltip=lambda row: row.model),
            Column("Size", lambda row: format_size(row.size_bytes), tooltip=self._size_tip),
            Column(
                "Details",
                lambda row: details_text(row.details),
                tooltip=lambda row: details_tip(row.details),
            ),
            Column(
                "Status", self.status_text, tooltip=self._status_tip, foreground=self._status_colour
            ),
            Column("", lambda _row: ""),  # the page puts the row's buttons here
        )
        super().__init__(columns, lambda row: row.key, parent)
        self._pending = pending
        self._now = now  # a replica's "loaded 3 min ago"
        pending.changed.connect(self._on_pending_changed)

    def status_text(self, row: ModelRow) -> str:
        """``Loading…`` while an action is pending, else the model's state."""
        action = self._pending.action(row.key)
        if action is not None:
            return f"{action}…"
        if row.spread is not None:
            return spread_status_text(row.spread)
        if row.replica is not None:
            return replica_mark_text(row.replica, self._now())
        state = "Loaded" if row.loaded else ("On disk" if row.managed else "Available")
        return state if row.reachable else f"{state} (offline)"

    def find(self, key: PendingKey) -> ModelRow | None:
        """The row for ``key``, also when the engine lists the model under a fuller name."""
        exact = self.get(key)
        if exact is not None:
            return exact
        for row in self.rows():
            if row.key[:2] == key[:2] and same_model(key.engine, row.model, key.model):
                return row
        return None

    def sync_node(self, node: str, rows: list[ModelRow]) -> None:
        """Make one node's rows equal ``rows`` with row-level changes (no reset)."""
        wanted = {row.key for row in rows}
        for key in [row.key for row in self.rows() if row.key.node == node]:
            if key not in wanted:
                self.remove(key)
        for row in rows:
            self.upsert(row)

    def remove_where(self, node: str, engine: str | None = None) -> None:
        """Drop a node's rows (or only one engine's)."""
        for row in self.rows():
            if row.key.node == node and engine in (None, row.engine):
                self.remove(row.key)

    def nodes(self) -> set[str]:
        """The nodes that have rows."""
        return {row.key.node for row in self.rows()}

    def _on_pending_changed(self, key: PendingKey) -> None:
        position = self.position(key)
        if position is not None:
            last = self.index(position, self.columnCount() - 1)
            self.dataChanged.emit(self.index(position, 0), last)

    def _status_colour(self, row: ModelRow) -> QColor | None:
        if self._pending.action(row.key) is not None:
            return state_colour(State.PENDING)
        if not row.reachable:
            return state_colour(State.IDLE)
        if row.spread is not None and row.spread.state == "degraded":
            return state_colour(State.WARN)
        return state_colour(State.OK) if row.loaded or row.spread is not None else None

    @staticmethod
    def _status_tip(row: ModelRow) -> str | None:
        if row.replica is not None and row.spread is None:
            return replica_mark_tooltip(row.replica)
        return spread_tip(row.spread) if row.spread is not None else None

    @staticmethod
    def _computer(row: ModelRow) -> str:
        return "This computer" if row.local else row.node_name

    @staticmethod
    def _computer_tip(row: ModelRow) -> str:
        if row.local:
            return f"This computer ({row.node_name})"
        if row.member and not row.reachable:
            return f"{row.node_name} cannot be reached: its models as last seen."
        if row.member:
            return f"{row.node_name}, paired with this computer"
        return f"{row.node_name}: its models are shown, not managed, until it is paired."

    @staticmethod
    def _size_tip(row: ModelRow) -> str:
        if row.size_bytes is not None:
            return f"{row.size_bytes:,} bytes"
        if not row.managed:
            return REMOTE_SIZE_TIP
        return f"{engine_title(row.engine)} does not report this model's size."


class ModelsSortProxy(QSortFilterProxyModel):
    """Keeps rows grouped: this node first, then each node by name, engine and model."""

    def __init__(self, source: ModelsModel, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.setSourceModel(source)
        self.setDynamicSortFilter(True)
        self.sort(0)

    def lessThan(self, left: ModelIndex, right: ModelIndex) -> bool:
        """Order by ``ModelRow.sort_key``."""
        first, second = left.data(ROW_ROLE), right.data(ROW_ROLE)
        if not isinstance(first, ModelRow) or not isinstance(second, ModelRow):
            return False
        return first.sort_key() < second.sort_key()
