"""One engine as a card: state, on/off switch, Install or Update with progress, Restart, ports
and log, for this computer's engines and every other member's alike (the controller sends a
member's commands with its ``node``). A member that cannot be reached shows its cards disabled;
engines other computers only report use the same card without controls, saying why. This
computer's engines add a line for their scheduler while it has work, an operation or a turn;
its space is kept while it is empty, so the port field and buttons never move under the cursor
as requests come and go. A refused port reads beside the field, and goes once it is edited.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QRectF, QSize, Qt
from PySide6.QtGui import QPainter, QPaintEvent, QPalette
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
    PROGRESS_VERBS,
    EngineRow,
    scheduler_text,
    state_colour,
    state_label,
)
from app.models.scheduler_text import scheduler_tip
from app.window import look
from app.window.indicator import ColourDot
from app.window.log_view import LogView
from app.window.look import KNOB, State
from app.window.node_card import ElidedLabel
from app.window.theme import is_dark
from app.window.widgets import muted_label, section_title, tint

READ_ONLY_TEXT = "Read-only"
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
            dark = is_dark(palette)
            track = (
                look.state_colour(State.OK, dark)
                if self.isChecked()
                else palette.color(QPalette.ColorRole.Mid)
            )
            if not self.isEnabled():
                track.setAlpha(110)
            rect = QRectF(1, 3, self.width() - 2, self.height() - 6)
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(track)
            painter.drawRoundedRect(rect, rect.height() / 2, rect.height() / 2)
            diameter = self.height() - 4.0
            left = self.width() - diameter - 2 if self.isChecked() else 2.0
            knob = KNOB.pick(dark)
            if not self.isEnabled():
                knob.setAlpha(200)
            painter.setBrush(knob)
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
    """The muted line under the name: process facts for managed engines, models otherwise."""
    if row.read_only:
        if not row.models:
            return "No models reported"
        count = len(row.models)
        return f"{count} model{'s' if count != 1 else ''}, {len(row.loaded)} loaded"
    if not row.installed:
        there = "" if row.local else f" on {row.node_name}"
        return f"Not found on {row.where}. Install downloads it into PAIR's data folder{there}."
    parts = [f"version {row.version}"] if row.version else []
    if row.backend:
        parts.append(f"runs on {row.backend}")
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
        return "not open" if row.local else "not known"
    api = DOOR_NAMES.get(row.door, row.door)
    if row.local:
        return f"{row.door_port}  ·  {api}, where apps on this computer connect"
    host = f"{row.address}:" if row.address else ""
    return f"{host}{row.door_port}  ·  {api}"


def note_text(row: EngineRow) -> str:
    """The muted note in the header: why the card has no controls, or none."""
    if row.read_only:
        reason = row.read_only_reason
        return f"{READ_ONLY_TEXT}: {reason}" if reason else READ_ONLY_TEXT
    if not row.reachable:
        return f"{row.node_name} cannot be reached"
    return ""


def install_text(row: EngineRow) -> str:
    """The progress bar's text: the stage and, where measured, the percentage."""
    if row.install is None:
        updating = row.pending == "Updating"
        return "Checking for the new version…" if updating else "Starting the download…"
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
        # The node cards' outline and corners; the window's colour inside, so the port field
        # (drawn in the base colour) stands out.
        self.setStyleSheet("#engineCard { border: 1px solid palette(mid); border-radius: 10px; }")
        self._build_header()
        self._build_ports()
        self._build_footer()
        self._lay_out()
        self._connect()
        self.set_row(row)

    def _build_header(self) -> None:
        self.name = section_title(f"<b>{self.row.display_name}</b>")
        self.dot = ColourDot()
        self.state_label = QLabel()
        self.switch = ToggleSwitch()
        self.install_button = QPushButton("Install")
        self.read_only = muted_label()
        self.read_only.setWordWrap(False)
        self.details = muted_label()
        # One line (the tooltip has the rest), so its height is the same with or without news.
        self.scheduler = ElidedLabel()  # this computer's engines, while their scheduler has news
        self.scheduler.setObjectName("schedulerLine")
        self.models = QLabel()
        self.models.setWordWrap(True)
        self.update_note = muted_label()
        self.progress = QProgressBar()
        self.progress.setTextVisible(True)

    def _build_ports(self) -> None:
        self.port_label = QLabel("Engine port")
        self.port_edit = QLineEdit()
        self.port_edit.setMaxLength(12)
        self.port_edit.setFixedWidth(80)
        self.apply_port_button = QPushButton("Apply")
        self.port_error = ElidedLabel()  # beside the field, so it never moves the rows below
        self.port_error.setObjectName("portError")
        tint(self.port_error, State.ERROR)
        self.door_label = QLabel("Front door")
        self.door_port = QLabel()
        self.door_port.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

    def _build_footer(self) -> None:
        self.notice = QLabel()
        self.notice.setWordWrap(True)
        self.notice.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.restart_button = QPushButton("Restart")
        self.update_button = QPushButton("Update")
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
        ports.addWidget(self.port_error, 0, 3)
        ports.addWidget(self.door_label, 1, 0)
        ports.addWidget(self.door_port, 1, 1, 1, 3)
        ports.setColumnStretch(3, 1)
        buttons = QHBoxLayout()
        buttons.addWidget(self.restart_button)
        buttons.addWidget(self.update_button)
        buttons.addWidget(self.log_button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(14, 10, 14, 12)
        layout.setSpacing(6)
        layout.addLayout(header)
        for widget in (self.details, self.scheduler, self.models, self.update_note, self.progress):
            layout.addWidget(widget)
        layout.addLayout(ports)
        layout.addWidget(self.notice)
        layout.addLayout(buttons)
        layout.addWidget(self.log_view)

    def _connect(self) -> None:
        engine, node = self.row.engine, self.row.node_id
        controller = self._controller
        self.switch.clicked.connect(self._on_switch_clicked)
        self.install_button.clicked.connect(lambda: controller.install(engine, node))
        self.restart_button.clicked.connect(lambda: controller.restart(engine, node))
        self.update_button.clicked.connect(lambda: controller.update(engine, node))
        self.apply_port_button.clicked.connect(self._on_apply_port_clicked)
        self.port_edit.returnPressed.connect(self._on_apply_port_clicked)
        self.port_edit.textEdited.connect(self._on_port_edit_text_edited)
        self.log_button.toggled.connect(self._on_log_button_toggled)
        self.log_view.refresh_requested.connect(lambda: controller.refresh_logs(engine, node))
        controller.logs_loaded.connect(self._on_controller_logs_loaded)
        controller.logs_failed.connect(self._on_controller_logs_failed)

    def changeEvent(self, event: QEvent) -> None:
        """Pick the state dot's shade again when the palette turns light or dark."""
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange:
            self.dot.set_colour(state_colour(self.row))

    def set_row(self, row: EngineRow) -> None:
        """Show ``row``: state, controls and their enablement, ports, progress, messages."""
        previous, self.row = self.row, row
        self.dot.set_colour(state_colour(row))
        self.state_label.setText(state_label(row))
        self.state_label.setToolTip(row.error or "")
        self.details.setText(detail_text(row))
        self.details.setVisible(bool(self.details.text()))
        self._show_scheduler(row)
        self._show_models(row)
        self._show_controls(row)
        self._show_ports(row, previous)
        self._show_progress(row)
        self._show_notice(row)

    def _show_scheduler(self, row: EngineRow) -> None:
        text = scheduler_text(row)
        self.scheduler.setText(text)
        self.scheduler.setToolTip(scheduler_tip(row.scheduler) if text else "")
        # This computer's installed engines may get a line with any request: keep its room.
        policy = self.scheduler.sizePolicy()
        policy.setRetainSizeWhenHidden(row.local and row.installed)
        self.scheduler.setSizePolicy(policy)
        self.scheduler.setVisible(bool(text))

    def _show_models(self, row: EngineRow) -> None:
        self.models.setVisible(row.read_only and bool(row.models))
        self.models.setText(models_text(row))
        self.update_note.setVisible(row.managed and row.update_note is not None)
        self.update_note.setText(sentence(row.update_note or ""))

    def _show_controls(self, row: EngineRow) -> None:
        managed, ready = row.managed, row.controllable and not busy(row)
        self.read_only.setText(note_text(row))
        self.read_only.setVisible(bool(self.read_only.text()))
        self.install_button.setVisible(managed and not row.installed)
        self.install_button.setEnabled(ready)
        installing = row.install is not None or row.pending == "Installing"
        self.install_button.setText("Installing…" if installing else "Install")
        self.switch.setVisible(managed and row.installed)
        self.switch.setChecked(switch_on(row))
        self.switch.setEnabled(ready and row.installed and not row.adopted)
        self.switch.setToolTip(self._switch_tip(row))
        self.restart_button.setVisible(managed and row.installed)
        self.restart_button.setEnabled(ready and row.state == "running" and not row.adopted)
        updating = row.pending == "Updating"
        self.update_button.setVisible(managed and (row.update_to is not None or updating))
        self.update_button.setEnabled(ready and row.update_to is not None)
        self.update_button.setText("Updating…" if updating else f"Update to {row.update_to}")
        self.update_button.setToolTip(f"Install version {row.update_to} on {row.where}")
        self.log_button.setVisible(managed)
        self.log_button.setEnabled(row.controllable)

    def _switch_tip(self, row: EngineRow) -> str:
        if not row.reachable:
            return f"{row.node_name} cannot be reached"
        if row.adopted:
            return "Started outside PAIR: stop it where it was started"
        return "Stop the engine" if switch_on(row) else "Start the engine"

    def _show_ports(self, row: EngineRow, previous: EngineRow) -> None:
        for widget in (self.port_label, self.port_edit, self.apply_port_button):
            widget.setVisible(row.managed)
        editable = row.controllable and not busy(row) and not row.adopted
        self.port_edit.setEnabled(editable)
        self.apply_port_button.setEnabled(editable)
        self.port_edit.setToolTip(f"A port from {MIN_PORT} to {MAX_PORT} on {row.where}")
        # Keep what the user typed (even a refused port) unless the port itself changed.
        port_moved = row.port != previous.port or not self.port_edit.text()
        if row.port is not None and (port_moved or not self.port_edit.isModified()):
            self.port_edit.setText(str(row.port))
        self.port_error.setText(sentence(row.port_error or ""))
        self.port_error.setVisible(bool(row.port_error))
        self.door_port.setText(door_text(row))

    def _show_progress(self, row: EngineRow) -> None:
        installing = row.install is not None or row.pending in PROGRESS_VERBS
        self.progress.setVisible(row.managed and installing)
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
        tint(self.notice, State.WARN if timed_out else State.ERROR)

    def _on_switch_clicked(self, checked: bool) -> None:
        self._controller.set_running(self.row.engine, checked, self.row.node_id)
        self.switch.setChecked(switch_on(self.row))  # the row decides, not the click

    def _on_apply_port_clicked(self) -> None:
        self._controller.set_port(self.row.engine, self.port_edit.text(), self.row.node_id)

    def _on_port_edit_text_edited(self, _text: str) -> None:
        if self.row.port_error is not None:
            self._controller.display.drop_port_error(self.row.key)

    def _on_log_button_toggled(self, shown: bool) -> None:
        self.log_view.setVisible(shown)
        self.log_button.setText("Hide log" if shown else "Show log")
        if shown:
            self.log_view.set_loading()
            self._controller.refresh_logs(self.row.engine, self.row.node_id)

    def _on_controller_logs_loaded(self, key: object, lines: list[str]) -> None:
        if key == self.row.key and self.row.managed:
            self.log_view.set_lines(lines)

    def _on_controller_logs_failed(self, key: object, message: str) -> None:
        if key == self.row.key and self.row.managed:
            self.log_view.set_error(message)
