"""The Overview page: a card per node in a grid that re-flows with the width."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, Qt
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import (
    QGridLayout,
    QHBoxLayout,
    QScrollArea,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app.broker.connection import BrokerConnection
from app.broker.state import ServiceState
from app.models.nodes import NodeCard, NodeRole, NodesModel
from app.window.node_card import MIN_CARD_WIDTH, NodeCardWidget
from app.window.widgets import (
    SPACE_SECTION,
    EmptyState,
    muted_label,
    page_layout,
    page_title,
)

CARD_SPACING = SPACE_SECTION
ADD_COMPUTER = "Add a computer…"
OPEN_SERVICE = "Open Settings → Service"
EMPTY_STATES: dict[ServiceState, tuple[str, str]] = {
    ServiceState.CONNECTING: (
        "Connecting to the PAIR service…",
        "Your computers and their live GPU, CPU and memory use appear here once it answers.",
    ),
    ServiceState.READY: (
        "No computers to show yet",
        "This computer appears here as soon as the service has read its hardware; other "
        "computers appear when they are found on your network or added by address.",
    ),
    ServiceState.DISCONNECTED: (
        "Not connected to the PAIR service",
        "The app reconnects when the service is back; Settings → Service can start it.",
    ),
    ServiceState.FAILED: (
        "Not connected to the PAIR service",
        "The service could not be kept running. Settings → Service can start it again.",
    ),
}


def column_count(width: int, minimum: int = MIN_CARD_WIDTH, spacing: int = CARD_SPACING) -> int:
    """How many cards of at least ``minimum`` pixels fit side by side in ``width``."""
    return max(1, (width + spacing) // (minimum + spacing))


class CardGrid(QScrollArea):
    """Cards left to right, top to bottom, in as many equal columns as fit the width."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._grid = QGridLayout()
        self._grid.setContentsMargins(0, 0, 0, 0)
        self._grid.setSpacing(CARD_SPACING)
        self._cards: list[QWidget] = []
        self._columns = 0
        body = QWidget()
        layout = QVBoxLayout(body)
        layout.setContentsMargins(0, 0, 4, 0)  # keep the cards off the scroll bar
        layout.addLayout(self._grid)
        layout.addStretch(1)  # spare height goes below the cards, not into them
        self.setWidget(body)
        self.setWidgetResizable(True)
        self.setFrameShape(QScrollArea.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)

    @property
    def columns(self) -> int:
        """The number of columns laid out."""
        return self._columns

    def set_cards(self, cards: list[QWidget]) -> None:
        """Show ``cards`` in this order."""
        if cards != self._cards:
            self._cards = list(cards)
            self._reflow(force=True)

    def resizeEvent(self, event: QResizeEvent) -> None:
        """Re-flow when the number of columns that fit changes."""
        super().resizeEvent(event)
        self._reflow()

    def _reflow(self, *, force: bool = False) -> None:
        # Count the scroll bar as present, so showing it cannot flip the column count back.
        width = self.width() - self.verticalScrollBar().sizeHint().width()
        columns = column_count(width)
        if not force and columns == self._columns:
            return
        # removeWidget deletes each card's grid item. Qt tells a card's new height only to the
        # first item made for it, so a taken item kept alive leaves the new item stale: the
        # card would be drawn at its old height once engine rows are added.
        for index in reversed(range(self._grid.count())):
            placed = self._grid.itemAt(index)
            if placed is not None and (card := placed.widget()) is not None:
                self._grid.removeWidget(card)
        for position, card in enumerate(self._cards):
            row, column = divmod(position, columns)
            # Top-aligned: each card is as tall as its content, not as its row's tallest.
            self._grid.addWidget(card, row, column, Qt.AlignmentFlag.AlignTop)
        for column in range(max(columns, self._columns)):
            self._grid.setColumnStretch(column, 1 if column < columns else 0)
        self._columns = columns


class OverviewPage(QWidget):
    """A card per node from ``NodesModel``; a changed row refreshes only its own card. With no
    cards, the empty state offers ``add_computer`` (connected) or ``open_service`` (not)
    where given."""

    def __init__(
        self,
        connection: BrokerConnection,
        model: NodesModel,
        parent: QWidget | None = None,
        *,
        add_computer: Callable[[], None] | None = None,
        open_service: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(parent)
        self._connection = connection
        self._model = model
        self._actions = {ADD_COMPUTER: add_computer, OPEN_SERVICE: open_service}
        self._cards: dict[str, NodeCardWidget] = {}
        self.summary = muted_label()
        self.summary.setWordWrap(False)
        self.grid = CardGrid()
        self.empty_state = EmptyState()
        self.empty_state.action_clicked.connect(self._on_empty_state_action_clicked)
        self.stack = QStackedWidget()
        self.stack.addWidget(self.grid)
        self.stack.addWidget(self.empty_state)
        self._lay_out()
        for signal in (model.rowsInserted, model.rowsRemoved, model.rowsMoved, model.modelReset):
            signal.connect(self._on_model_rows_changed)
        model.dataChanged.connect(self._on_model_data_changed)
        connection.state_changed.connect(self._on_connection_state_changed)
        self._on_model_rows_changed()

    def _lay_out(self) -> None:
        heading = QHBoxLayout()
        heading.addWidget(page_title("Overview"))
        heading.addStretch(1)
        heading.addWidget(self.summary, 0, Qt.AlignmentFlag.AlignBottom)
        layout = page_layout(QVBoxLayout(self))
        layout.addLayout(heading)
        layout.addWidget(self.stack, 1)

    def card(self, node_id: str) -> NodeCardWidget | None:
        """The card widget of ``node_id``, if shown."""
        return self._cards.get(node_id)

    def cards(self) -> list[NodeCardWidget]:
        """The card widgets in display order."""
        return [self._cards[card.node_id] for card in self._model.cards()]

    def _on_model_rows_changed(self, *_args: object) -> None:
        wanted = [card.node_id for card in self._model.cards()]
        for node_id in set(self._cards) - set(wanted):
            widget = self._cards.pop(node_id)
            widget.hide()
            widget.deleteLater()
        for row, node_id in enumerate(wanted):
            if node_id not in self._cards:
                self._cards[node_id] = NodeCardWidget()
                self._refresh_row(row)
        self.grid.set_cards([self._cards[node_id] for node_id in wanted])
        self._refresh_state()

    def _on_model_data_changed(
        self,
        top_left: QModelIndex | QPersistentModelIndex,
        bottom_right: QModelIndex | QPersistentModelIndex,
        _roles: object = None,
    ) -> None:
        for row in range(top_left.row(), bottom_right.row() + 1):
            self._refresh_row(row)
        self._refresh_summary()

    def _on_connection_state_changed(self, _state: ServiceState) -> None:
        self._refresh_state()

    def _refresh_row(self, row: int) -> None:
        index = self._model.index(row, 0)
        card: NodeCard | None = self._model.data(index, NodeRole.CARD)
        widget = self._cards.get(card.node_id) if card is not None else None
        if card is not None and widget is not None:
            widget.show_node(card, self._model.data(index, NodeRole.HISTORY))

    def _refresh_state(self) -> None:
        state = self._connection.state
        showing_cards = state is ServiceState.READY and bool(self._cards)
        if not showing_cards:
            self.empty_state.show_text(*EMPTY_STATES[state], self._empty_action(state))
        self.stack.setCurrentWidget(self.grid if showing_cards else self.empty_state)
        self._refresh_summary()

    def _empty_action(self, state: ServiceState) -> str | None:
        """The button under the empty state: one that can fill the page, where given."""
        action = ADD_COMPUTER if state is ServiceState.READY else OPEN_SERVICE
        wanted = state is not ServiceState.CONNECTING and self._actions[action] is not None
        return action if wanted else None

    def _on_empty_state_action_clicked(self) -> None:
        act = self._actions.get(self.empty_state.action_button.text())
        if act is not None:
            act()

    def _refresh_summary(self) -> None:
        cards = self._model.cards()
        online = sum(1 for card in cards if card.reachable)
        noun = "computer" if len(cards) == 1 else "computers"
        self.summary.setText(f"{len(cards)} {noun} · {online} online" if cards else "")
