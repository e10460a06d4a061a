"""The confirmation for "Reset app data": exactly what is deleted, what is kept, what happens,
and a separate choice for the models."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.controllers.reset_data import ResetDataController, ResetPreview
from app.controllers.reset_data_files import DELETED, KEPT_NOTE, MODELS
from app.models.errors import SEVERITY_COLOURS
from app.window.widgets import muted_label

GB = 10**9
MB = 10**6
WHAT_HAPPENS = (
    "The app stops the PAIR service it started, deletes these files, and starts a fresh "
    "service: default settings, no jobs history, no API keys, no cluster, and a new identity "
    "for this computer (other members see a new computer that must be invited again)."
)


def size_text(size: int) -> str:
    """``3.2 GB``, ``450 MB`` or ``0 MB``."""
    if size >= GB:
        return f"{size / GB:.1f}\u00a0GB"
    return f"{size / MB:.0f}\u00a0MB"


def deleted_list_html(data_dir: Path, log_dir: Path) -> str:
    """The deleted entries as an HTML list, each with what it holds."""
    items = "".join(f"<li><tt>{kind.name}</tt>: {kind.holds}</li>" for kind in DELETED)
    items += f"<li>the log files in <tt>{log_dir}</tt></li>"
    return f"From <tt>{data_dir}</tt> this deletes:<ul>{items}</ul>"


class ResetDataDialog(QDialog):
    """Asks before a reset; Reset runs it through the controller (which may still refuse)."""

    def __init__(self, controller: ResetDataController, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._controller = controller
        self.setWindowTitle("Reset app data")
        self.setMinimumWidth(560)
        self.deleted = QLabel(deleted_list_html(controller.data_dir, controller.log_dir))
        self.deleted.setWordWrap(True)
        self.deleted.setTextFormat(Qt.TextFormat.RichText)
        self.models_check = QCheckBox()
        self.what_happens = QLabel(WHAT_HAPPENS)
        self.what_happens.setWordWrap(True)
        self.kept = muted_label(KEPT_NOTE)
        self.kept.setWordWrap(True)
        self.refusal = QLabel()
        self.refusal.setWordWrap(True)
        self.refusal.setStyleSheet(f"color: {SEVERITY_COLOURS['error'].name()};")
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.reset_button = QPushButton("Delete and start fresh")
        self.buttons.addButton(self.reset_button, QDialogButtonBox.ButtonRole.DestructiveRole)
        self.buttons.button(QDialogButtonBox.StandardButton.Cancel).setDefault(True)
        layout = QVBoxLayout(self)
        for widget in (self.deleted, self.models_check, self.what_happens, self.kept):
            layout.addWidget(widget)
        layout.addWidget(self.refusal)
        layout.addWidget(self.buttons)
        self.buttons.rejected.connect(self.reject)
        self.reset_button.clicked.connect(self._on_reset_button_clicked)
        controller.preview_ready.connect(self._on_controller_preview_ready)
        self.show_preview(None)

    def refresh(self) -> None:
        """Re-measure the models and re-check whether a reset may run now."""
        refusal = self._controller.may_reset()
        self.refusal.setText(refusal or "")
        self.refusal.setVisible(refusal is not None)
        self.reset_button.setEnabled(refusal is None and not self._controller.running)
        self._controller.request_preview()

    def open(self) -> None:
        """Show the dialog with what is there now."""
        self.models_check.setChecked(False)  # models stay unless asked for each time
        self.refresh()
        super().open()

    def show_preview(self, preview: ResetPreview | None) -> None:
        """Show the model stores' size (None: still measuring)."""
        if preview is None:
            text, enabled = f"Also delete {MODELS.holds} (measuring…)", False
        elif not preview.has_models:
            text, enabled = f"Also delete {MODELS.holds} (there are none)", False
        else:
            size = size_text(preview.models_bytes)
            text, enabled = f"Also delete {MODELS.holds}: {size}", True
        self.models_check.setText(text)
        self.models_check.setEnabled(enabled)
        if not enabled:
            self.models_check.setChecked(False)

    def _on_controller_preview_ready(self, preview: ResetPreview) -> None:
        self.show_preview(preview)

    def _on_reset_button_clicked(self) -> None:
        self._controller.reset(models=self.models_check.isChecked())
        self.accept()
