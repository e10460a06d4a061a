"""About PAIR: the mark, this app's version and commit, the service's, the data folder, and the
licences of PAIR and of the Qt it is built on."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app import versions
from app.broker.connection import BrokerConnection
from app.controllers.service import ServiceController
from app.icons import app_icon
from app.window.widgets import (
    DIALOG_MARGINS,
    SPACE,
    SPACE_SECTION,
    copy_to_clipboard,
    muted_label,
    page_title,
)

TAGLINE = "The Personal AI Router: your computers as one private cluster for local LLMs."
NOT_CONNECTED = "not connected"
LICENCES = (
    "PAIR is free software under the Apache License 2.0. Its window is drawn with Qt through "
    'PySide6 (<a href="https://doc.qt.io/qtforpython-6/">Qt for Python</a>), used under the '
    'GNU <a href="https://www.gnu.org/licenses/lgpl-3.0.html">LGPL v3</a>.'
)
MARK_SIZE = QSize(64, 64)


def service_version(version: str | None, commit: str | None, connected: bool) -> str:
    """The service's version and commit while connected to it, else ``not connected``."""
    if not connected or version is None:
        return NOT_CONNECTED
    return versions.with_commit(version, commit)


class AboutDialog(QDialog):
    """Shows what this build is and what it talks to; the service row follows the connection."""

    def __init__(
        self,
        connection: BrokerConnection,
        service: ServiceController,
        *,
        version: str,
        commit: str | None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("About PAIR")
        self._connection = connection
        self._service = service
        self.app_version = QLabel(versions.with_commit(version, commit))
        self.service_version = QLabel()
        self.data_dir = QLabel(str(service.data_dir))
        self.qt_version = QLabel(versions.qt_version())
        self.python_version = QLabel(versions.python_version())
        for label in self._values():
            label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.licences = muted_label(LICENCES)
        self.licences.setOpenExternalLinks(True)
        self._lay_out()
        service.info_changed.connect(self._on_service_info_changed)
        connection.session_changed.connect(self._on_connection_session_changed)
        self._refresh()

    def details(self) -> str:
        """The facts as plain text, for a bug report."""
        rows = [
            ("PAIR app", self.app_version),
            ("PAIR service", self.service_version),
            ("Data folder", self.data_dir),
            ("Qt", self.qt_version),
            ("Python", self.python_version),
        ]
        return "\n".join(f"{name}: {label.text()}" for name, label in rows)

    def _values(self) -> tuple[QLabel, ...]:
        return (
            self.app_version,
            self.service_version,
            self.data_dir,
            self.qt_version,
            self.python_version,
        )

    def _lay_out(self) -> None:
        mark = QLabel()
        mark.setPixmap(app_icon().pixmap(MARK_SIZE))
        mark.setAlignment(Qt.AlignmentFlag.AlignTop)
        heading = QVBoxLayout()
        heading.addWidget(page_title("PAIR"))
        heading.addWidget(muted_label(TAGLINE))
        top = QHBoxLayout()
        top.setSpacing(2 * SPACE)
        top.addWidget(mark)
        top.addLayout(heading, 1)
        form = QFormLayout()
        form.addRow("Version", self.app_version)
        form.addRow("Service", self.service_version)
        form.addRow("Data folder", self.data_dir)
        form.addRow("Qt", self.qt_version)
        form.addRow("Python", self.python_version)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.copy_button = QPushButton("Copy details")
        self.copy_button.setToolTip("Copy these versions and paths, e.g. for a bug report")
        buttons.addButton(self.copy_button, QDialogButtonBox.ButtonRole.ActionRole)
        self.copy_button.clicked.connect(self._on_copy_button_clicked)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(*DIALOG_MARGINS)
        layout.setSpacing(SPACE_SECTION)
        layout.addLayout(top)
        layout.addLayout(form)
        layout.addWidget(self.licences)
        layout.addWidget(buttons)
        self.setMinimumWidth(460)

    def _refresh(self) -> None:
        info = self._service.info
        connected = self._connection.ownership is not None
        self.service_version.setText(
            service_version(info.broker_version, info.broker_commit, connected)
        )

    def _on_service_info_changed(self) -> None:
        self._refresh()

    def _on_connection_session_changed(self) -> None:
        self._refresh()

    def _on_copy_button_clicked(self) -> None:
        copy_to_clipboard(self.details(), self.copy_button)

    def show_and_raise(self) -> None:
        """Show the dialog (again) in front."""
        self.show()
        self.raise_()
        self.activateWindow()
