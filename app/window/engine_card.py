"""One engine as a card: state, on/off switch, Install with progress, Restart, ports and log.

Other nodes' engines use the same card without controls ("read-only until pairing").
"""

from __future__ import annotations

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPaintEvent, QPalette
from PySide6.QtWidgets import (
    QAbstractButton,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from app.controllers.engines import EnginesController
from app.models.engines import (
    DOOR_NAMES,
    MAX_PORT,
    MIN_PORT,
    EngineRow,
    state_colour,
    state_label,
)
from app.window.indicator import ColourDot
from app.window.log_view import LogView
from app.window.widgets import muted_label

ERROR_COLOUR = "#c62828"
WARNING_COLOUR = "#b26a00"
READ_ONLY_TEXT = "Read-only until pairing"
_TRANSIENT = ("starting", "stopping")
_SWITCHED_ON_BY = ("Starting", "Restarting")


class ToggleSwitch(QAbstractButton):
    """A checkable on/off switch drawn as a track with a sliding knob."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setCheckable(True)
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)

    def sizeHint(self) -> QSize:
        """A fixed, finger-sized switch."""
        return QSize(44, 24)

    def paintEvent(self, event: QPaintEvent) -> None:
        """Track in the highlight colour when on, knob on the right when on."""
        painter = QPainter(self)
        try:
            painter.setRenderHint(QPainter.RenderHint.Antialiasing)
            palette = self.palette()
            track = QColor("#2e7d32") if self.isChecked() else palette.color(QPalette.ColorRole.Mid)
            if not self.isEnabled():
                track.setAlpha(110)
            rect = QRectF(1, 3, self.width() - 2, self.height() - 6)
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(track)
            painter.drawRoundedRect(rect, rect.height() / 2, rect.height() / 2)
            diameter = self.height() - 4.0
            left = self.width() - diameter - 2 if self.isChecked() else 2.0
            painter.setBrush(QColor("#ffffff") if self.isEnabled() else QColor("#e6e6e6"))
            painter.setPen(palette.color(QPalette.ColorRole.Mid))
            painter.drawEllipse(QRectF(left, 2, diameter, diameter))
        finally:
            painter.end()


def sentence(text: str) -> str:
    """A message as a sentence: capital first letter (the broker's are lower case)."""
    return text[:1].upper() + text[1:]


def switch_on(row: EngineRow) -> bool:
    """Where the switch points: the pending action's goal, else the engine's state."""
    if row.pending in _SWITCHED_ON_BY:
        return True
    if row.pending == "Stopping":
        return False
    return row.state in ("running", "starting")


def busy(row: EngineRow) -> bool:
    """Whether an action or an install is under way (controls wait for it)."""
    return row.pending is not None or row.install is not None or row.state in _TRANSIENT


def detail_text(row: EngineRow) -> str:
    """The muted line under the name: process facts here, models over there."""
    if not row.local:
        if not row.models:
            return "No models reported"
        count = len(row.models)
        return f"{count} model{'s' if count != 1 else ''}, {len(row.loaded)} loaded"
    if not row.installed:
        return "Not found on this computer. Install downloads it into PAIR's data folder."
    parts = []
    if row.adopted:
        parts.append("already running when PAIR found it: PAIR will not stop or move it")
    elif row.pid is not None:
        parts.append(f"PID {row.pid}")
    if row.slots is not None:
        parts.append(f"{row.slots} slot{'s' if row.slots != 1 else ''}")
    return " · ".join(parts)


def models_text(row: EngineRow) -> str:
    """Another node's models, the loaded ones marked."""
    loaded = set(row.loaded)
    names = [f"{name} (loaded)" if name in loaded else name for name in row.models]
    return "Models: " + ", ".join(names)


def door_text(row: EngineRow) -> str:
    """The front door's real port and what it serves (read-only: set when the service starts)."""
    if row.door_port is None:
        return "not open"
    api = DOOR_NAMES.get(row.door, row.door)
    if row.local:
        return f"{row.door_port}  ·  {api}, where apps on this computer connect"
    host = f"{row.address}:" if row.address else ""
    return f"{host}{row.door_port}  ·  {api}"


def install_text(row: EngineRow) -> str:
    """The progress bar's text: the stage and, where measured, the percentage."""
    if row.install is None:
        return "Starting the download…"
    if row.install.percent is None:
        return row.install.stage
    return f"{row.install.stage} %p%"


class EngineCard(QFrame):
    """One engine. Controls call the controller; everything shown comes from ``set_row``."""

    def __init__(
        self, row: EngineRow, controller: EnginesController, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.row = row
        self._controller = controller
        self.setObjectName("engineCard")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self._build_header()
        self._build_ports()
        self._build_footer()
        self._lay_out()
        self._connect()
        self.set_row(row)

    def _build_header(self) -> None:
        self.name = QLabel(f"<b>{self.row.display_name}</b>")
        font = self.name.font()
        font.setPointSizeF(font.pointSizeF() * 1.15)
        self.name.setFont(font)
        self.dot = ColourDot()
        self.state_label = QLabel()
        self.switch = ToggleSwitch()
        self.install_button = QPushButton("Install")
        self.read_only = muted_label(READ_ONLY_TEXT)
        self.read_only.setWordWrap(False)
        self.details = muted_label()
        self.models = QLabel()
        self.models.setWordWrap(True)
        self.progress = QProgressBar()
        self.progress.setTextVisible(True)

    def _build_ports(self) -> None:
        self.port_label = QLabel("Engine port")
        self.port_edit = QLineEdit()
        self.port_edit.setMaxLength(12)
        self.port_edit.setFixedWidth(80)
        self.port_edit.setToolTip(f"A port from {MIN_PORT} to {MAX_PORT} on this computer")
        self.apply_port_button = QPushButton("Apply")
        self.port_error = QLabel()
        self.port_error.setWordWrap(True)
        self.port_error.setStyleSheet(f"color: {ERROR_COLOUR};")
        self.door_label = QLabel("Front door")
        self.door_port = QLabel()
        self.door_port.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

    def _build_footer(self) -> None:
        self.notice = QLabel()
        self.notice.setWordWrap(True)
        self.notice.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.restart_button = QPushButton("Restart")
        self.log_button = QPushButton("Show log")
        self.log_button.setCheckable(True)
        self.log_view = LogView(f"{self.row.display_name} output")
        self.log_view.hide()

    def _lay_out(self) -> None:
        header = QHBoxLayout()
        header.setSpacing(8)
        header.addWidget(self.name)
        header.addWidget(self.dot)
        header.addWidget(self.state_label)
        header.addStretch(1)
        header.addWidget(self.read_only)
        header.addWidget(self.install_button)
        header.addWidget(self.switch)
        ports = QGridLayout()
        ports.setHorizontalSpacing(8)
        ports.addWidget(self.port_label, 0, 0)
        ports.addWidget(self.port_edit, 0, 1)
        ports.addWidget(self.apply_port_button, 0, 2)
        ports.addWidget(self.door_label, 1, 0)
        ports.addWidget(self.door_port, 1, 1, 1, 3)
        ports.setColumnStretch(3, 1)
        buttons = QHBoxLayout()
        buttons.addWidget(self.restart_button)
        buttons.addWidget(self.log_button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(14, 10, 14, 12)
        layout.setSpacing(6)
        layout.addLayout(header)
        layout.addWidget(self.details)
        layout.addWidget(self.models)
        layout.addWidget(self.progress)
        layout.addLayout(ports)
        layout.addWidget(self.port_error)
        layout.addWidget(self.notice)
        layout.addLayout(buttons)
        layout.addWidget(self.log_view)

    def _connect(self) -> None:
        engine = self.row.engine
        self.switch.clicked.connect(self._on_switch_clicked)
        self.install_button.clicked.connect(lambda: self._controller.install(engine))
        self.restart_button.clicked.connect(lambda: self._controller.restart(engine))
        self.apply_port_button.clicked.connect(self._on_apply_port_clicked)
        self.port_edit.returnPressed.connect(self._on_apply_port_clicked)
        self.log_button.toggled.connect(self._on_log_button_toggled)
        self.log_view.refresh_requested.connect(lambda: self._controller.refresh_logs(engine))
        self._controller.logs_loaded.connect(self._on_controller_logs_loaded)
        self._controller.logs_failed.connect(self._on_controller_logs_failed)

    def set_row(self, row: EngineRow) -> None:
        """Show ``row``: state, controls and their enablement, ports, progress, messages."""
        previous, self.row = self.row, row
        self.dot.set_colour(state_colour(row))
        self.state_label.setText(state_label(row))
        self.state_label.setToolTip(row.error or "")
        self.details.setText(detail_text(row))
        self.details.setVisible(bool(self.details.text()))
        self._show_models(row)
        self._show_controls(row)
        self._show_ports(row, previous)
        self._show_progress(row)
        self._show_notice(row)

    def _show_models(self, row: EngineRow) -> None:
        self.models.setVisible(not row.local and bool(row.models))
        self.models.setText(models_text(row))

    def _show_controls(self, row: EngineRow) -> None:
        local, idle = row.local, not busy(row)
        self.read_only.setVisible(not local)
        self.install_button.setVisible(local and not row.installed)
        self.install_button.setEnabled(local and idle)
        self.install_button.setText("Installing…" if row.install or row.pending else "Install")
        self.switch.setVisible(local and row.installed)
        self.switch.setChecked(switch_on(row))
        self.switch.setEnabled(local and idle and row.installed and not row.adopted)
        self.switch.setToolTip(self._switch_tip(row))
        self.restart_button.setVisible(local and row.installed)
        self.restart_button.setEnabled(
            local and idle and row.state == "running" and not row.adopted
        )
        self.log_button.setVisible(local)
        if not local:
            for button in (self.install_button, self.switch, self.restart_button, self.log_button):
                button.setEnabled(False)

    def _switch_tip(self, row: EngineRow) -> str:
        if row.adopted:
            return "Started outside PAIR: stop it where it was started"
        return "Stop the engine" if switch_on(row) else "Start the engine"

    def _show_ports(self, row: EngineRow, previous: EngineRow) -> None:
        local = row.local
        for widget in (self.port_label, self.port_edit, self.apply_port_button):
            widget.setVisible(local)
        editable = local and not busy(row) and not row.adopted
        self.port_edit.setEnabled(editable)
        self.apply_port_button.setEnabled(editable)
        # Keep what the user typed (even a refused port) unless the port itself changed.
        port_moved = row.port != previous.port or not self.port_edit.text()
        if row.port is not None and (port_moved or not self.port_edit.isModified()):
            self.port_edit.setText(str(row.port))
        self.port_error.setText(sentence(row.port_error or ""))
        self.port_error.setVisible(bool(row.port_error))
        self.door_port.setText(door_text(row))

    def _show_progress(self, row: EngineRow) -> None:
        installing = row.install is not None or row.pending == "Installing"
        self.progress.setVisible(row.local and installing)
        if row.install is not None and row.install.percent is not None:
            self.progress.setRange(0, 100)
            self.progress.setValue(round(row.install.percent))
        else:
            self.progress.setRange(0, 0)  # busy indicator: the stage cannot be measured
        self.progress.setFormat(install_text(row))

    def _show_notice(self, row: EngineRow) -> None:
        text = row.notice or (row.error if row.state == "error" else None)
        self.notice.setVisible(bool(text))
        self.notice.setText(sentence(text or ""))
        timed_out = bool(row.notice) and "did not confirm in time" in (row.notice or "")
        colour = WARNING_COLOUR if timed_out else ERROR_COLOUR
        self.notice.setStyleSheet(f"color: {colour};")

    def _on_switch_clicked(self, checked: bool) -> None:
        self._controller.set_running(self.row.engine, checked)
        self.switch.setChecked(switch_on(self.row))  # the row decides, not the click

    def _on_apply_port_clicked(self) -> None:
        self._controller.set_port(self.row.engine, self.port_edit.text())

    def _on_log_button_toggled(self, shown: bool) -> None:
        self.log_view.setVisible(shown)
        self.log_button.setText("Hide log" if shown else "Show log")
        if shown:
            self.log_view.set_loading()
            self._controller.refresh_logs(self.row.engine)

    def _on_controller_logs_loaded(self, engine: str, lines: list[str]) -> None:
        if engine == self.row.engine and self.row.local:
            self.log_view.set_lines(lines)

    def _on_controller_logs_failed(self, engine: str, message: str) -> None:
        if engine == self.row.engine and self.row.local:
            self.log_view.set_error(message)
