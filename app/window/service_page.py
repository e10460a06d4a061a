"""Settings → Service: the service box, logging, versions, the inference check's slot, recent
log lines, the components table and the reset of the app's data."""

from __future__ import annotations

from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from app.broker.connection import BrokerConnection
from app.broker.state import ServiceState
from app.controllers.reset_data import ResetDataController
from app.controllers.service import ServiceController
from app.models.components import ComponentsModel
from app.window.service_logs import LogsViewer, ResetBox
from app.window.service_status import ServiceStatusBox
from app.window.widgets import muted_label
from backend.protocol.types.broker import LOG_LEVELS, LogLevel


class LoggingBox(QGroupBox):
    """The broker's log level and a button that opens the log folder."""

    def __init__(
        self,
        connection: BrokerConnection,
        controller: ServiceController,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__("Logs", parent)
        self._connection = connection
        self._controller = controller
        self.level_combo = QComboBox()
        for level in LOG_LEVELS:
            self.level_combo.addItem(level.capitalize(), level)
        self.level_combo.setToolTip("How much the service writes to its log (saved).")
        self.open_button = QPushButton("Open log folder")
        self.open_button.setToolTip(str(controller.log_dir))
        # A read-only field: long paths scroll inside it instead of widening the page.
        folder = QLineEdit(str(controller.log_dir))
        folder.setReadOnly(True)
        folder.setFrame(False)
        folder.setCursorPosition(0)
        folder.setMinimumWidth(120)
        folder.setToolTip(str(controller.log_dir))
        folder.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        form = QFormLayout(self)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.ExpandingFieldsGrow)
        form.addRow("Log level", self.level_combo)
        form.addRow("Folder", folder)
        form.addRow("", self.open_button)
        self.level_combo.activated.connect(self._on_level_combo_activated)
        self.open_button.clicked.connect(controller.open_log_folder)
        controller.info_changed.connect(self.refresh)
        connection.state_changed.connect(self.refresh)
        self.refresh()

    def refresh(self) -> None:
        """Show the broker's current level; the combo works only while connected."""
        level = self._controller.info.log_level
        index = self.level_combo.findData(level) if level is not None else -1
        self.level_combo.setCurrentIndex(index)
        self.level_combo.setEnabled(self._connection.state is ServiceState.READY)

    def _on_level_combo_activated(self, index: int) -> None:
        level: LogLevel = self.level_combo.itemData(index)
        self._controller.set_log_level(level)


class VersionsBox(QGroupBox):
    """This app's, the broker's, Python's and Qt's versions."""

    def __init__(self, controller: ServiceController, parent: QWidget | None = None) -> None:
        super().__init__("Versions", parent)
        self._controller = controller
        self._form = QFormLayout(self)
        self.values: dict[str, QLabel] = {}
        for label, value in controller.versions():
            self.values[label] = QLabel(value)
            self._form.addRow(label, self.values[label])
        controller.info_changed.connect(self.refresh)

    def refresh(self) -> None:
        """Re-read the versions (the broker's changes per session)."""
        for label, value in self._controller.versions():
            self.values[label].setText(value)


class ComponentsBox(QGroupBox):
    """The components table, or a note while there are no components to show."""

    def __init__(self, model: ComponentsModel, parent: QWidget | None = None) -> None:
        super().__init__("Components", parent)
        self._model = model
        self.table = components_table(model)
        self.empty_note = muted_label("No components to show while the service is not running.")
        layout = QVBoxLayout(self)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.empty_note)
        for signal in (model.modelReset, model.rowsInserted, model.rowsRemoved):
            signal.connect(self._on_model_changed)
        self._on_model_changed()

    def _on_model_changed(self, *_args: object) -> None:
        self.empty_note.setVisible(self._model.rowCount() == 0)


def components_table(model: ComponentsModel) -> QTableView:
    """A read-only, row-selecting table over the components model."""
    table = QTableView()
    table.setModel(model)
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.setAlternatingRowColors(True)
    table.verticalHeader().hide()
    table.setMinimumHeight(180)
    header = table.horizontalHeader()
    header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    header.setStretchLastSection(True)
    return table


class CheckSlot(QWidget):
    """Where the inference check sits (a box with its own title); hidden until it is added."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.slot = QVBoxLayout(self)
        self.slot.setContentsMargins(0, 0, 0, 0)
        self.hide()

    def add_widget(self, widget: QWidget) -> None:
        """Show ``widget`` in the slot."""
        self.slot.addWidget(widget)
        self.show()


class ServicePage(QScrollArea):
    """Everything about the local PAIR service on one scrollable page."""

    def __init__(
        self,
        connection: BrokerConnection,
        controller: ServiceController,
        components: ComponentsModel,
        parent: QWidget | None = None,
        *,
        reset: ResetDataController | None = None,
    ) -> None:
        super().__init__(parent)
        self.reset_controller = reset or ResetDataController(connection, controller.data_dir, self)
        self.status_box = ServiceStatusBox(connection, controller)
        self.logging_box = LoggingBox(connection, controller)
        self.versions_box = VersionsBox(controller)
        self.check_slot = CheckSlot()
        self.logs_viewer = LogsViewer(controller)
        self.components_box = ComponentsBox(components)
        self.components_table = self.components_box.table
        self.reset_box = ResetBox(self.reset_controller)
        self.setWidget(self._body())
        self.setWidgetResizable(True)
        self.setFrameShape(QScrollArea.Shape.NoFrame)

    def _body(self) -> QWidget:
        body = QWidget()
        layout = QVBoxLayout(body)
        layout.setContentsMargins(0, 12, 0, 0)
        layout.setSpacing(12)
        layout.addWidget(self.status_box)
        row = QHBoxLayout()
        row.setSpacing(12)
        row.addWidget(self.logging_box, 1)
        row.addWidget(self.versions_box, 1)
        layout.addLayout(row)
        layout.addWidget(self.check_slot)
        layout.addWidget(self.logs_viewer)
        layout.addWidget(self.components_box, 1)
        layout.addWidget(self.reset_box)
        return body

    def add_check_widget(self, widget: QWidget) -> None:
        """Embed the inference check (``InferenceCheck``) under the logging and versions row."""
        self.check_slot.add_widget(widget)

    async def close_tasks(self) -> None:
        """Cancel the log reads and a reset's preview (at the app's shutdown)."""
        await self.logs_viewer.close_tasks()
        await self.reset_controller.close()

    def showEvent(self, event: QShowEvent) -> None:
        """Read the shown log when the page first appears."""
        super().showEvent(event)
        self.logs_viewer.read_current_once()
