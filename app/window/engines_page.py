"""The Engines page: this computer's engines and every other member's with the same controls,
then the engines other computers on the network report (read-only, saying why)."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QModelIndex, QPersistentModelIndex
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from app.broker.connection import BrokerConnection
from app.broker.state import ServiceState
from app.controllers.engines import EnginesController
from app.models.engines import EngineKey, EngineRow, EnginesModel
from app.models.nodes import GpuLine, NodesModel
from app.window.engine_card import EngineCard
from app.window.gpu_lines import gpus_text
from app.window.widgets import (
    PAGE_MARGINS,
    SPACE,
    SPACE_TIGHT,
    muted_label,
    page_title,
    section_title,
)
from backend.protocol.types.base import EngineName, NodeId
from backend.protocol.types.engines import MemberEngines

INTRO = (
    "Start, stop and set up the engines that run models on this computer and on the computers "
    "paired with it. Engines other computers on your network report are shown read-only."
)
NOT_CONNECTED = {
    ServiceState.CONNECTING: "Connecting to the PAIR service…",
    ServiceState.DISCONNECTED: (
        "Disconnected from the PAIR service: engines cannot be shown or controlled until it "
        "is back."
    ),
    ServiceState.FAILED: (
        "The PAIR service is not running: engines cannot be shown or controlled. "
        "Start it from Settings → Service."
    ),
}
NO_OTHERS = (
    "No other computers have been found. Engines of the computers paired with this one show "
    "here with the same controls."
)


class NodeHeader(QWidget):
    """A node's heading: its name, beside it a muted line (address, read-only note), and under
    it a line per GPU of the computer (none without a GPU)."""

    def __init__(
        self, title: str, note: str, node_id: NodeId, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.node_id = node_id
        self.title = section_title(f"<b>{title}</b>")
        self.note = muted_label(note)
        self.gpus = muted_label()
        self.gpus.setObjectName("gpuLines")
        self.gpus.hide()
        top = QHBoxLayout()
        top.addWidget(self.title)
        top.addWidget(self.note, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, SPACE, 0, 0)
        layout.setSpacing(SPACE_TIGHT)
        layout.addLayout(top)
        layout.addWidget(self.gpus)

    def show_gpus(self, gpus: Sequence[GpuLine]) -> None:
        """One line per GPU: name, utilisation and VRAM where read; hidden without a GPU."""
        self.gpus.setText(gpus_text(gpus))
        self.gpus.setVisible(bool(gpus))


def node_note(row: EngineRow) -> str:
    """The muted text beside the name of this computer or of a computer outside the cluster."""
    if row.local:
        return row.node_name
    where = f"{row.address} · " if row.address else ""
    reason = row.read_only_reason or "not managed from here"
    return f"{where}{reason}: its running engines are shown, not managed"


def member_note(member: MemberEngines, address: str | None) -> str:
    """The muted text beside a member's name: where it is, or that it cannot be reached."""
    if member.reachable:
        return f"{address} · paired" if address else "Paired"
    why = f" ({member.error})" if member.error else ""
    seen = "its engines show as last seen" if member.engines else "its engines show once it answers"
    return f"Cannot be reached{why}. PAIR keeps trying; {seen}."


class EnginesPage(QScrollArea):
    """Cards grouped by node, built from ``EnginesModel``: this computer, the other members (by
    name, also one not heard from yet), then computers outside the cluster. Rows added or
    removed and members that change rebuild the groups; changed rows update their card in
    place."""

    def __init__(
        self,
        connection: BrokerConnection,
        model: EnginesModel,
        controller: EnginesController,
        parent: QWidget | None = None,
        *,
        nodes: NodesModel | None = None,
    ) -> None:
        super().__init__(parent)
        self._connection = connection
        self._model = model
        self._controller = controller
        self._nodes = nodes  # the Overview's model: each computer's GPUs, for its header
        self.cards: dict[EngineKey, EngineCard] = {}
        self.headers: list[NodeHeader] = []  # in display order
        self._build()
        model.rowsInserted.connect(self._on_model_rows_changed)
        model.rowsRemoved.connect(self._on_model_rows_changed)
        model.modelReset.connect(self._on_model_rows_changed)
        model.dataChanged.connect(self._on_model_data_changed)
        connection.state_changed.connect(self._on_connection_state_changed)
        controller.problem_changed.connect(self._refresh_notices)
        controller.nodes_changed.connect(self._rebuild)
        if nodes is not None:
            for signal in (nodes.dataChanged, nodes.rowsInserted, nodes.modelReset):
                signal.connect(self._on_nodes_changed)
        self._rebuild()

    def _build(self) -> None:
        self.connection_note = QLabel()
        self.connection_note.setWordWrap(True)
        self.connection_note.setObjectName("connectionNote")
        self.connection_note.setStyleSheet(
            "#connectionNote { background: rgba(128, 128, 128, 28);"
            " border-left: 4px solid palette(mid); border-radius: 3px; padding: 8px 12px; }"
        )
        self.problem = QLabel()
        self.problem.setWordWrap(True)
        self.retry_button = QPushButton("Try again")
        self.retry_button.clicked.connect(self._controller.reload)
        problem_row = QHBoxLayout()
        problem_row.addWidget(self.problem, 1)
        problem_row.addWidget(self.retry_button)
        self.others_title = section_title("<b>Other computers</b>")
        self.no_others = muted_label(NO_OTHERS)
        self._cards_layout = QVBoxLayout()
        self._cards_layout.setSpacing(SPACE)
        body = QWidget()
        layout = QVBoxLayout(body)
        layout.setContentsMargins(*PAGE_MARGINS)
        layout.setSpacing(SPACE)
        layout.addWidget(page_title("Engines"))
        layout.addWidget(muted_label(INTRO))
        layout.addWidget(self.connection_note)
        layout.addLayout(problem_row)
        layout.addLayout(self._cards_layout)
        layout.addStretch(1)
        self.setWidget(body)
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)

    def card(self, node_id: NodeId, engine: EngineName) -> EngineCard | None:
        """The card of one engine, if shown."""
        return self.cards.get((node_id, engine))

    def _on_model_rows_changed(self, *_args: object) -> None:
        self._rebuild()

    def _on_model_data_changed(
        self, top: QModelIndex | QPersistentModelIndex, bottom: QModelIndex | QPersistentModelIndex
    ) -> None:
        for position in range(top.row(), bottom.row() + 1):
            row = self._model.row_at(position)
            card = self.cards.get(row.key)
            if card is not None:
                card.set_row(row)

    def _rebuild(self) -> None:
        rows = self._model.rows()
        wanted = {row.key for row in rows}
        for key in [key for key in self.cards if key not in wanted]:
            self.cards.pop(key).deleteLater()
        self._empty_layout()
        self._add_groups(rows)
        self._refresh_notices()

    def _empty_layout(self) -> None:
        # removeWidget, not takeAt: a taken item left to Python's collector would detach the
        # widget from its next layout item, which then keeps stale size hints.
        layout = self._cards_layout
        for position in reversed(range(layout.count())):
            item = layout.itemAt(position)
            widget = item.widget() if item is not None else None
            if widget is not None:
                layout.removeWidget(widget)
        for header in self.headers:
            header.deleteLater()
        self.headers = []

    def _add_groups(self, rows: list[EngineRow]) -> None:
        local = [row for row in rows if row.local]
        if local:
            self._add_group("This computer", node_note(local[0]), local)
        members = self._controller.members()
        listed = {member.node_id for member in members}
        # Read-only groups, and (should the member list lag behind) members' rows on their own.
        others = [row for row in rows if not row.local and row.node_id not in listed]
        self._cards_layout.addWidget(self.others_title)
        self._cards_layout.addWidget(self.no_others)
        anyone = bool(members or others)
        self.others_title.setVisible(anyone or self._ready())
        self.no_others.setVisible(not anyone and self._ready())
        for member in members:
            group = [row for row in rows if row.node_id == member.node_id]
            address = group[0].address if group else None
            self._add_group(member.name, member_note(member, address), group, member.node_id)
        for node_id in dict.fromkeys(row.node_id for row in others):
            group = [row for row in others if row.node_id == node_id]
            note = node_note(group[0]) if group[0].read_only else ""
            self._add_group(group[0].node_name, note, group)

    def _add_group(
        self, title: str, note: str, rows: list[EngineRow], node_id: NodeId | None = None
    ) -> None:
        header = NodeHeader(title, note, node_id or (rows[0].node_id if rows else NodeId("")))
        header.show_gpus(self._gpus_of(header.node_id))
        self.headers.append(header)
        self._cards_layout.addWidget(header)
        for row in rows:
            card = self.cards.get(row.key)
            if card is None:
                card = self.cards[row.key] = EngineCard(row, self._controller)
            else:
                card.set_row(row)
            self._cards_layout.addWidget(card)

    def _gpus_of(self, node_id: NodeId) -> tuple[GpuLine, ...]:
        """The GPUs the Overview knows of ``node_id`` while it answers (stale figures hidden)."""
        if self._nodes is None:
            return ()
        position = self._nodes.position(node_id)
        if position is None:
            return ()
        card = self._nodes.cards()[position]
        return card.gpus if card.reachable else ()

    def _on_nodes_changed(self, *_args: object) -> None:
        for header in self.headers:
            header.show_gpus(self._gpus_of(header.node_id))

    def _ready(self) -> bool:
        return self._connection.state is ServiceState.READY

    def _on_connection_state_changed(self, _state: ServiceState) -> None:
        self._rebuild()

    def _refresh_notices(self) -> None:
        state = self._connection.state
        self.connection_note.setText(NOT_CONNECTED.get(state, ""))
        self.connection_note.setVisible(state is not ServiceState.READY)
        problem = self._controller.problem if state is ServiceState.READY else None
        self.problem.setText(problem or "")
        self.problem.setVisible(problem is not None)
        self.retry_button.setVisible(problem is not None)
