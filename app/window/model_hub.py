"""The model hub: the shipped catalogue, a search box, and a Pull button per entry and engine,
pulling on the computer chosen in the Pull bar (this one unless another member is chosen)."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from app.catalog import Catalog, CatalogEntry, PullEngine
from app.controllers.models import ModelsController
from app.models.keyed_table import ROW_ROLE
from app.models.models import CatalogFilter, CatalogModel, engine_title, on_any_change
from app.window.widgets import muted_label
from backend.protocol.types.base import EngineName

_ERROR = QColor("#c62828")
ROW_HEIGHT = 34


class EntryPulls(QWidget):
    """One button per engine an entry works with: Pull, Pulling…, or Installed."""

    pull_clicked = Signal(str, str)  # engine, the entry's name on that engine

    def __init__(self, entry: CatalogEntry, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.entry = entry
        layout = QHBoxLayout(self)
        layout.setContentsMargins(4, 1, 4, 1)
        layout.setSpacing(4)
        self.buttons: dict[PullEngine, QPushButton] = {}
        for engine, name in entry.engines.items():
            button = QPushButton()
            button.setAutoDefault(False)
            # As wide as its longest label, so the engines line up from row to row.
            widest = max(f"Pull · {engine_title(engine)}", "Pulling…", key=len)
            button.setMinimumWidth(button.fontMetrics().horizontalAdvance(widest) + 24)
            button.clicked.connect(
                lambda _checked=False, e=engine, n=name: self.pull_clicked.emit(e, n)
            )
            layout.addWidget(button)
            self.buttons[engine] = button
        layout.addStretch(1)

    def refresh(self, controller: ModelsController) -> None:
        """Say per engine whether the model is there, coming, or can be pulled now (on the
        computer pulls go to)."""
        node = controller.pull_node
        where = controller.node_name_of(node)
        running = set(controller.pull_engines(node))
        for engine, button in self.buttons.items():
            name = self.entry.engines[engine]
            title = engine_title(engine)
            if controller.is_installed(EngineName(engine), name, node):
                text, tip, enabled = f"On {title}", f"{name} is on {where}", False
            elif controller.is_pulling(EngineName(engine), name, node):
                text, tip, enabled = "Pulling…", f"Downloading {name} on {where}", False
            elif controller.reachable(node) and engine in running:
                tip = f"Download {name} with {title} on {where}"
                text, enabled = f"Pull · {title}", True
            else:
                tip = f"Start {title} on {where} to pull {name}"
                text, enabled = f"Pull · {title}", False
            button.setText(text)
            button.setToolTip(tip)
            button.setEnabled(enabled)


class ModelHub(QWidget):
    """Search the catalogue and pull an entry with one of the engines of the computer chosen
    for pulls."""

    def __init__(
        self, controller: ModelsController, catalog: Catalog, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self._controller = controller
        self.catalog = CatalogModel(catalog.entries, self)
        self.proxy = CatalogFilter(self.catalog, self)
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search models by name or purpose (e.g. coding, vision)")
        self.search.setClearButtonEnabled(True)
        self.error = QLabel(catalog.error or "")
        self.error.setWordWrap(True)
        self.error.setStyleSheet(f"color: {_ERROR.name()};")
        self.error.setVisible(catalog.error is not None)
        self.table = self._make_table()
        self.no_match = muted_label("No model in the catalogue matches your search.")
        note = muted_label(
            "A curated list shipped with PAIR. Sizes are approximate downloads; "
            "any other model can be pulled by name above."
        )
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 8, 0, 0)
        layout.addWidget(self.search)
        layout.addWidget(self.error)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.no_match)
        layout.addWidget(note)
        self.search.textChanged.connect(self._on_search_text_changed)
        self._connect_controller()
        self.refresh()

    def entry_pulls(self, entry_id: str) -> EntryPulls | None:
        """The buttons of the entry ``entry_id`` while it is shown."""
        position = self.catalog.position(entry_id)
        if position is None:
            return None
        source = self.catalog.index(position, CatalogModel.ACTIONS_COLUMN)
        widget = self.table.indexWidget(self.proxy.mapFromSource(source))
        return widget if isinstance(widget, EntryPulls) else None

    def visible_entries(self) -> list[str]:
        """Ids of the entries the search shows, in order."""
        return [
            entry.id
            for position in range(self.proxy.rowCount())
            if isinstance(entry := self.proxy.index(position, 0).data(ROW_ROLE), CatalogEntry)
        ]

    def refresh(self, *_args: object) -> None:
        """Give every shown entry its buttons and bring their state up to date."""
        for position in range(self.proxy.rowCount()):
            index = self.proxy.index(position, CatalogModel.ACTIONS_COLUMN)
            entry = index.data(ROW_ROLE)
            if not isinstance(entry, CatalogEntry):
                continue
            widget = self.table.indexWidget(index)
            if not isinstance(widget, EntryPulls):
                widget = EntryPulls(entry)
                widget.pull_clicked.connect(self._on_entry_pulls_pull_clicked)
                self.table.setIndexWidget(index, widget)
            widget.refresh(self._controller)
        self.no_match.setVisible(self.proxy.rowCount() == 0 and self.catalog.rowCount() > 0)

    def _make_table(self) -> QTableView:
        table = QTableView()
        table.setModel(self.proxy)
        table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        table.setAlternatingRowColors(True)
        table.setWordWrap(False)
        table.verticalHeader().hide()
        table.verticalHeader().setDefaultSectionSize(ROW_HEIGHT)
        header = table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)
        return table

    def _connect_controller(self) -> None:
        controller = self._controller
        for model in (self.proxy, controller.models, controller.pulls):
            on_any_change(model, self.refresh)
        controller.pending.changed.connect(self.refresh)
        controller.engines_changed.connect(self.refresh)
        controller.pull_node_changed.connect(self.refresh)
        controller.connection.state_changed.connect(self.refresh)

    def _on_entry_pulls_pull_clicked(self, engine: str, name: str) -> None:
        self._controller.pull(EngineName(engine), name, self._controller.pull_node)

    def _on_search_text_changed(self, text: str) -> None:
        self.proxy.set_query(text)
