"""The Models page: models per computer and engine (with the architecture, quantization and
context length of llama.cpp's model files) with Load, Eject and Delete (on this computer and on
every other member alike), "Load spread across members…" beside Load for this computer's
llama.cpp models (a spread model's row says who holds which share), a Pull bar that pulls
on any member with live progress, and the model hub. Views only: every command goes through
``ModelsController``.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QMenu,
    QMessageBox,
    QTableView,
    QTabWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.catalog import Catalog
from app.controllers.hub import HubController
from app.controllers.models import ModelsController
from app.controllers.spread import SpreadCandidate, SpreadLoader
from app.models.keyed_table import ROW_ROLE
from app.models.model_details import details_text
from app.models.models import (
    ModelRow,
    ModelsModel,
    ModelsSortProxy,
    engine_title,
    on_any_change,
    restarts_after_delete,
)
from app.models.row_actions import (
    RowButton,
    action_tip,
    blocked_reason,
    can_spread,
    spread_action_tip,
    spread_blocked_reason,
)
from app.pending import PendingKey
from app.window.banners import Banner
from app.window.look import State, state_colour
from app.window.model_hub import ModelHub
from app.window.models_pulls import PullBar, PullsPanel
from app.window.spread_dialog import SpreadDialog
from app.window.squeeze_columns import StretchedColumns
from app.window.widgets import (
    PAGE_MARGINS,
    SPACE,
    EmptyState,
    left_aligned_headers,
    muted_label,
    page_title,
)

ROW_HEIGHT = 34
OPEN_HUB = "Open the Model hub"
SPREAD_ENTRY = "Load spread across members…"
MORE_TIP = "More ways to load: spread the model across members"


def confirm_delete(parent: QWidget, row: ModelRow) -> bool:
    """Ask before deleting; an engine that restarts after a delete (LM Studio) says so."""
    text = (
        f"Delete {row.model} from {engine_title(row.engine)} on {row.where}?\n\n"
        "Its files are removed from disk; using it again means downloading it again."
    )
    if restarts_after_delete(row.engine):
        text += (
            f"\n\n{engine_title(row.engine)} restarts to finish deleting, so anything it is "
            "serving right now is interrupted."
        )
    answer = QMessageBox.question(
        parent,
        "Delete model?",
        text,
        QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
        QMessageBox.StandardButton.Cancel,
    )
    return answer == QMessageBox.StandardButton.Yes


class RowActions(QWidget):
    """Load, Eject and Delete for one row of this computer or another member (and, beside Load,
    a menu to load a llama.cpp model of this computer spread across members); a note for
    computers outside the cluster."""

    clicked = Signal(str, object)  # "load" | "eject" | "delete" | "spread", PendingKey

    def __init__(self, key: PendingKey, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.key = key
        layout = QHBoxLayout(self)
        layout.setContentsMargins(4, 1, 4, 1)
        layout.setSpacing(4)
        self.buttons: dict[str, QToolButton] = {}
        for name, title in (("load", "Load"), ("eject", "Eject"), ("delete", "Delete")):
            # Tool buttons: as wide as their word, so the model names keep the room.
            button = QToolButton()
            button.setText(title)
            button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
            button.clicked.connect(lambda _checked=False, n=name: self.clicked.emit(n, self.key))
            layout.addWidget(button)
            self.buttons[name] = button
        # An arrow, not a fourth word: the names keep their room in a narrow window.
        self.more = QToolButton()
        self.more.setArrowType(Qt.ArrowType.DownArrow)
        self.more.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.more.setStyleSheet("QToolButton::menu-indicator { image: none; }")
        self.more.setToolTip(MORE_TIP)
        menu = QMenu(self.more)
        menu.setToolTipsVisible(True)  # a disabled entry says why
        self.spread_action = menu.addAction(SPREAD_ENTRY)
        self.spread_action.triggered.connect(lambda: self.clicked.emit("spread", self.key))
        self.more.setMenu(menu)
        layout.insertWidget(1, self.more)
        self.view_only = muted_label("View only")
        self.view_only.setToolTip("Pair this computer to manage its models from here.")
        layout.addWidget(self.view_only)
        layout.addStretch(1)

    def refresh(
        self,
        row: ModelRow,
        pending: str | None,
        connected: bool,
        served: str | None = None,
        members: Sequence[SpreadCandidate] = (),
    ) -> None:
        """Enable what makes sense now (nothing while an action is ``pending`` or the member
        that has the model cannot be reached); a disabled button's tooltip says why, an
        enabled one's what it does (``served``: the model the row's engine serves now;
        ``members``: the members a spread could use)."""
        self.view_only.setVisible(not row.managed)
        buttons: tuple[RowButton, ...] = ("load", "eject", "delete")
        for name in buttons:
            button = self.buttons[name]
            button.setVisible(row.managed)
            reason = blocked_reason(row, name, pending=pending, connected=connected)
            button.setEnabled(row.managed and reason is None)
            button.setToolTip(reason or action_tip(row, name, served))
        self._refresh_spread(row, pending, connected, members)

    def _refresh_spread(
        self,
        row: ModelRow,
        pending: str | None,
        connected: bool,
        members: Sequence[SpreadCandidate],
    ) -> None:
        self.more.setVisible(can_spread(row))
        reachable = sum(member.reachable for member in members)
        reason = spread_blocked_reason(
            row, pending=pending, connected=connected, members=len(members), reachable=reachable
        )
        self.spread_action.setEnabled(can_spread(row) and reason is None)
        self.spread_action.setToolTip(reason or spread_action_tip(row))


class ModelsTab(QWidget):
    """The table of models with a row of buttons each, or a note while it is empty."""

    def __init__(self, controller: ModelsController, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._controller = controller
        self._model: ModelsModel = controller.models
        self.spread = SpreadLoader(controller, self)
        self.spread_dialog: SpreadDialog | None = None
        self.proxy = ModelsSortProxy(self._model, self)
        self.table = QTableView()
        self.table.setModel(self.proxy)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setAlternatingRowColors(True)
        self.table.verticalHeader().hide()
        self.table.verticalHeader().setDefaultSectionSize(ROW_HEIGHT)
        self.table.setWordWrap(False)
        left_aligned_headers(self.table)
        self._size_columns()
        self.empty_note = EmptyState()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, SPACE, 0, 0)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.empty_note, 1)
        on_any_change(self.proxy, self.refresh)
        controller.engines_changed.connect(self.refresh)
        controller.connection.state_changed.connect(self.refresh)
        self.refresh()

    def _size_columns(self) -> None:
        """Names keep their width; the room a narrow window lacks comes out of Details and
        Status (the right-hand columns), which elide."""
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(ModelsModel.DETAILS_COLUMN, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(ModelsModel.STATUS_COLUMN, QHeaderView.ResizeMode.Stretch)
        # Stretched columns share the slack: Status gets room for its longest word, Details
        # what is left, and both shrink (down to this) only when the window is narrow.
        header.setMinimumSectionSize(self.fontMetrics().horizontalAdvance("Status") + 16)
        self.table.setTextElideMode(Qt.TextElideMode.ElideRight)
        # Qt leaves them wide when the other columns alone fill the table: held at the minimum.
        self.squeeze = StretchedColumns(
            self.table, (ModelsModel.DETAILS_COLUMN, ModelsModel.STATUS_COLUMN)
        )

    def actions_for(self, key: PendingKey) -> RowActions | None:
        """The buttons shown on the row of ``key``."""
        position = self._model.position(key)
        if position is None:
            return None
        source = self._model.index(position, ModelsModel.ACTIONS_COLUMN)
        widget = self.table.indexWidget(self.proxy.mapFromSource(source))
        return widget if isinstance(widget, RowActions) else None

    def refresh(self, *_args: object) -> None:
        """Give every row its buttons, refresh their state, and show the note when empty."""
        connected = self._controller.connected
        for position in range(self.proxy.rowCount()):
            index = self.proxy.index(position, ModelsModel.ACTIONS_COLUMN)
            row = index.data(ROW_ROLE)
            if not isinstance(row, ModelRow):
                continue
            widget = self.table.indexWidget(index)
            if not isinstance(widget, RowActions) or widget.key != row.key:
                widget = RowActions(row.key)
                widget.clicked.connect(self._on_row_actions_clicked)
                self.table.setIndexWidget(index, widget)
            pending = self._controller.pending.action(row.key)
            members = self.spread.candidates(row.key) if can_spread(row) else []
            widget.refresh(row, pending, connected, self._served(row), members)
        # Only model files say what they are (llama.cpp's): no column of blanks without them.
        described = any(details_text(row.details) for row in self._model.rows())
        self.table.setColumnHidden(ModelsModel.DETAILS_COLUMN, not described)
        empty = self.proxy.rowCount() == 0
        self.table.setVisible(not empty)
        self.empty_note.setVisible(empty)
        self.empty_note.show_text(*self._empty_text())

    def _served(self, row: ModelRow) -> str | None:
        """The model ``row``'s engine on ``row``'s computer has loaded (the first one)."""
        for other in self._model.rows():
            same_engine = other.key.node == row.key.node and other.engine == row.engine
            if same_engine and other.loaded:
                return other.model
        return None

    def _empty_text(self) -> tuple[str, str, str | None]:
        """The empty state's headline, sentence and button (the Model hub fills the list)."""
        if not self._controller.connected:
            return "No models to show", "Models appear here once the PAIR service is running.", None
        if not self._controller.pull_engines():
            return (
                "No engine is running",
                "Start Ollama or LM Studio on the Engines page to see their models here.",
                None,
            )
        return "No models yet", "Pull one above, or pick one in the Model hub.", OPEN_HUB

    def _on_row_actions_clicked(self, action: str, key: PendingKey) -> None:
        row = self._model.get(key)
        if row is None:
            return
        if action == "load":
            self._controller.load(key)
        elif action == "eject":
            self._controller.eject(key)
        elif action == "delete" and confirm_delete(self, row):
            self._controller.delete(key)
        elif action == "spread":
            self.open_spread_dialog(row)

    def open_spread_dialog(self, row: ModelRow) -> SpreadDialog:
        """Show the dialog that loads ``row``'s model spread over members (window-modal, so
        the loop keeps running while it is open)."""
        if self.spread_dialog is not None:
            self.spread_dialog.close()
            self.spread_dialog.deleteLater()
        self.spread_dialog = SpreadDialog(self.spread, row, self)
        self.spread_dialog.open()
        return self.spread_dialog


class ModelsPage(QWidget):
    """Title, a message strip for failed commands, the Pull bar, two tabs and the pulls'
    progress under them; ``hub`` searches Hugging Face (built here when not given, then
    without the computers' memory to suggest a file for)."""

    def __init__(
        self,
        controller: ModelsController,
        catalog: Catalog,
        hub: HubController | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.notice = Banner(state_colour(State.ERROR), "Models", "")
        self.notice.add_button("Dismiss", self.notice.hide)
        self.notice.hide()
        self.pull_bar = PullBar(controller)
        self.pulls_panel = PullsPanel(controller)
        self.models_tab = ModelsTab(controller)
        self.hub = ModelHub(controller, catalog, hub or HubController(controller, parent=self))
        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)
        self.tabs.addTab(self.models_tab, "On your computers")
        self.tabs.addTab(self.hub, "Model hub")
        self.models_tab.empty_note.action_clicked.connect(
            lambda: self.tabs.setCurrentWidget(self.hub)
        )
        layout = QVBoxLayout(self)
        layout.setContentsMargins(*PAGE_MARGINS)
        layout.setSpacing(SPACE)
        layout.addWidget(page_title("Models"))
        layout.addWidget(self.notice)
        layout.addWidget(self.pull_bar)
        layout.addWidget(self.tabs, 1)
        # Below the tabs, so a pull that starts never moves the rows under the cursor.
        layout.addWidget(self.pulls_panel)
        controller.action_failed.connect(self._on_controller_action_failed)
        self.models_tab.spread.answered.connect(self._on_spread_answered)

    def _on_spread_answered(self, key: PendingKey, reason: str) -> None:
        """A refusal goes in the strip only when its dialog was closed before the answer."""
        dialog = self.models_tab.spread_dialog
        if not reason or (dialog is not None and dialog.isVisible() and dialog.key == key):
            return
        self._on_controller_action_failed(
            f"Could not load {key.model} spread over members: {reason}"
        )

    def _on_controller_action_failed(self, message: str) -> None:
        self.notice.message.setText(message)
        self.notice.show()
