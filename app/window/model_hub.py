"""The model hub: the shipped catalogue (a search box and a Pull button per entry and engine)
and a search of Hugging Face's GGUF models, both pulling on the computer chosen in the Pull
bar (this one unless another member is chosen)."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QButtonGroup,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QStackedWidget,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from app.catalog import Catalog, CatalogEntry, PullEngine, pulled_name
from app.controllers.hub import HubController, pull_blocker
from app.controllers.models import ModelsController
from app.models.hub import CatalogFilter, CatalogModel
from app.models.keyed_table import ROW_ROLE
from app.models.models import engine_title, on_any_change
from app.window.hub_search import HubSearch
from app.window.look import State
from app.window.widgets import muted_label, read_only_table, segmented, tint
from backend.protocol.types.base import EngineName

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
        for engine, button in self.buttons.items():
            name = pulled_name(self.entry.engines[engine])
            title = engine_title(engine)
            blocker = pull_blocker(controller, EngineName(engine), node)
            if controller.is_installed(EngineName(engine), name, node):
                text, tip, enabled = f"On {title}", f"{name} is on {where}", False
            elif controller.is_pulling(EngineName(engine), name, node):
                text, tip, enabled = "Pulling…", f"Downloading {name} on {where}", False
            elif blocker is None:
                tip = f"Download {name} with {title} on {where}"
                text, enabled = f"Pull · {title}", True
            else:
                text, tip, enabled = f"Pull · {title}", blocker, False
            button.setText(text)
            button.setToolTip(tip)
            button.setEnabled(enabled)


class ModelHub(QWidget):
    """Two ways to find a model, one at a time: the curated catalogue (search it, pull an
    entry with one of the engines of the computer chosen for pulls) and a search of Hugging
    Face's GGUF models (``hugging_face``)."""

    def __init__(
        self,
        controller: ModelsController,
        catalog: Catalog,
        hub: HubController,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self._controller = controller
        self.hub_controller = hub
        self.catalog = CatalogModel(catalog.entries, self)
        self.proxy = CatalogFilter(self.catalog, self)
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search models by name or purpose (e.g. coding, vision)")
        self.search.setClearButtonEnabled(True)
        self.error = QLabel(catalog.error or "")
        self.error.setWordWrap(True)
        tint(self.error, State.ERROR)
        self.error.setVisible(catalog.error is not None)
        self.table = self._make_table()
        self.no_match = muted_label("No model in the catalogue matches your search.")
        self.no_match.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.curated_button = QPushButton("Curated list")
        self.hugging_face_button = QPushButton("Search Hugging Face")
        self.hugging_face = HubSearch(hub)
        self.pages = QStackedWidget()
        self.pages.addWidget(self._curated_page())
        self.pages.addWidget(self.hugging_face)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 8, 0, 0)
        layout.addLayout(self._mode_row())
        layout.addWidget(self.pages, 1)
        self.search.textChanged.connect(self._on_search_text_changed)
        self._connect_controller()
        self.refresh()

    def show_hugging_face(self, shown: bool = True) -> None:
        """Show the Hugging Face search (or, not ``shown``, the curated list)."""
        button = self.hugging_face_button if shown else self.curated_button
        button.setChecked(True)
        self.pages.setCurrentIndex(1 if shown else 0)
        (self.hugging_face.search if shown else self.search).setFocus()

    def _mode_row(self) -> QHBoxLayout:
        group = QButtonGroup(self)
        row = QHBoxLayout()
        row.setSpacing(0)
        for button in (self.curated_button, self.hugging_face_button):
            button.setCheckable(True)
            button.setAutoDefault(False)
            group.addButton(button)
            row.addWidget(button)
        row.addStretch(1)
        segmented(self.curated_button, self.hugging_face_button)
        self.curated_button.setChecked(True)
        self.curated_button.setToolTip(
            "Models picked for PAIR, for Ollama, LM Studio and llama.cpp"
        )
        self.hugging_face_button.setToolTip("Any GGUF model on Hugging Face, pulled into llama.cpp")
        self.curated_button.clicked.connect(lambda: self.show_hugging_face(False))
        self.hugging_face_button.clicked.connect(lambda: self.show_hugging_face(True))
        return row

    def _curated_page(self) -> QWidget:
        # The note takes the table's place when nothing matches: no blank, collapsed table.
        self.matches = QStackedWidget()
        self.matches.addWidget(self.table)
        self.matches.addWidget(self.no_match)
        note = muted_label(
            "A curated list shipped with PAIR. Sizes are approximate downloads; "
            "any other model can be pulled by name above, or found on Hugging Face."
        )
        page = QWidget()
        layout = QVBoxLayout(page)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.search)
        layout.addWidget(self.error)
        layout.addWidget(self.matches, 1)
        layout.addWidget(note)
        return page

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
        unmatched = self.proxy.rowCount() == 0 and self.catalog.rowCount() > 0
        self.matches.setCurrentWidget(self.no_match if unmatched else self.table)

    def _make_table(self) -> QTableView:
        return read_only_table(self.proxy, ROW_HEIGHT, stretch_column=2)

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
