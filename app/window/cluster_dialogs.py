"""The Cluster page's dialogs: the confirmations and the new key's name it asks for
(``Prompts``), and a new API key's secret, shown once (``SecretDialog``)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.controllers.cluster_page import NewKey, client_settings
from app.window.settings_general import error_label, show_error
from app.window.widgets import SPACE, copy_to_clipboard, fixed_font


class Prompts:
    """The questions the page asks, modal; tests answer them with their own."""

    def confirm(self, parent: QWidget, title: str, text: str, action: str) -> bool:
        """Ask before a change that cannot be undone; True when ``action`` was pressed."""
        box = QMessageBox(QMessageBox.Icon.Warning, title, text, parent=parent)
        go = box.addButton(action, QMessageBox.ButtonRole.DestructiveRole)
        cancel = box.addButton(QMessageBox.StandardButton.Cancel)
        box.setDefaultButton(cancel)
        box.exec()
        return box.clickedButton() is go

    def key_name(self, parent: QWidget) -> str | None:
        """The new key's name, or None when cancelled."""
        text, ok = QInputDialog.getText(
            parent,
            "Create API key",
            "A name to tell the key apart, e.g. the computer or app it is for:",
        )
        return text.strip() if ok and text.strip() else None


class SecretDialog(QDialog):
    """A new key's secret, shown this once, with Copy and the settings a client uses."""

    def __init__(self, key: NewKey, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("API key created")
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.setMinimumWidth(560)
        fixed = fixed_font()
        self.secret = QLineEdit(key.secret)
        self.secret.setReadOnly(True)
        self.secret.setFont(fixed)
        self.copy_button = QPushButton("Copy")
        self.copy_button.clicked.connect(
            lambda: copy_to_clipboard(self.secret.text(), self.copy_button)
        )
        self.settings = QPlainTextEdit(client_settings(key))
        self.settings.setReadOnly(True)
        self.settings.setFont(fixed)
        self.settings.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        lines = self.settings.document().blockCount()  # every line shown: nothing to scroll
        margins = 2 * (self.settings.document().documentMargin() + self.settings.frameWidth())
        height = self.settings.fontMetrics().lineSpacing() * lines + margins + 4
        self.settings.setFixedHeight(int(height))
        self.settings.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.copy_settings_button = QPushButton("Copy settings")
        self.copy_settings_button.clicked.connect(
            lambda: copy_to_clipboard(self.settings.toPlainText(), self.copy_settings_button)
        )
        self._lay_out(key)

    def _lay_out(self, key: NewKey) -> None:
        layout = QVBoxLayout(self)
        intro = QLabel(
            f"Copy the secret of <b>{key.info.name}</b> now: it cannot be shown again "
            "(PAIR keeps only a hash of it)."
        )
        intro.setWordWrap(True)
        layout.addWidget(intro)
        row = QHBoxLayout()
        row.addWidget(self.secret, 1)
        row.addWidget(self.copy_button)
        layout.addLayout(row)
        layout.addSpacing(SPACE)
        layout.addWidget(QLabel("On the other computer, set:"))
        layout.addWidget(self.settings)
        copy_row = QHBoxLayout()
        copy_row.addStretch(1)
        copy_row.addWidget(self.copy_settings_button)
        layout.addLayout(copy_row)
        if not key.lan_access:
            note = error_label()
            show_error(note, "LAN access is off: other computers are refused until it is on.")
            layout.addWidget(note)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)

    def done(self, result: int) -> None:
        """Close, and let go of the secret."""
        self.secret.clear()
        self.settings.clear()
        super().done(result)
