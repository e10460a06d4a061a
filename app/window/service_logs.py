"""The Service page's log viewer (the service's and this app's log, read on demand) and its
reset box."""

from __future__ import annotations

from PySide6.QtWidgets import (
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.controllers.reset_data import ResetDataController
from app.controllers.reset_data_files import ResetOutcome
from app.controllers.service import ServiceController
from app.window.log_view import LogView
from app.window.reset_data_dialog import ResetDataDialog
from app.window.widgets import muted_label
from backend.common.tasks import TaskSet

LOG_TITLES = {"service": "Service log", "app": "App log"}
RESET_NOTE = (
    "Deletes this computer's PAIR settings, jobs history, API keys, cluster membership, "
    "identity and logs, then starts a fresh service. You are asked first and shown exactly what "
    "goes."
)


class LogsViewer(QGroupBox):
    """The last lines of the service's and this app's log, one tab each, read when a tab is
    first shown and on Refresh. Owns the read tasks."""

    def __init__(self, controller: ServiceController, parent: QWidget | None = None) -> None:
        super().__init__("Recent log lines", parent)
        self._controller = controller
        self._tasks = TaskSet(type(self).__name__)
        self.tabs = QTabWidget()
        self.views: dict[str, LogView] = {}
        for which, title in LOG_TITLES.items():
            view = LogView(title)
            view.title.setToolTip(str(controller.log_path(which)))
            view.refresh_requested.connect(lambda which=which: self.read(which))
            self.views[which] = view
            self.tabs.addTab(view, title)
        layout = QVBoxLayout(self)
        layout.addWidget(self.tabs)
        self.tabs.currentChanged.connect(self._on_tabs_current_changed)
        self._read_once: set[str] = set()

    def read(self, which: str) -> None:
        """Read ``which`` log again in the background; its view shows the lines or why not."""
        self.views[which].set_loading()
        try:
            self._tasks.spawn(self._read(which), name=f"read-{which}")
        except RuntimeError:  # no running loop (the app is closing)
            self.views[which].set_error("the app is closing")

    def read_current_once(self) -> None:
        """Read the shown tab's log unless it was read already."""
        which = list(self.views)[self.tabs.currentIndex()]
        if which not in self._read_once:
            self._read_once.add(which)
            self.read(which)

    async def close_tasks(self) -> None:
        """Cancel a read under way."""
        await self._tasks.close(timeout=1.0)

    async def _read(self, which: str) -> None:
        view = self.views[which]
        try:
            lines = await self._controller.read_log(which)
        except FileNotFoundError:
            view.set_lines([])
            view.status.setText("nothing logged yet")
            return
        except OSError as exc:
            view.set_error(exc.strerror or str(exc))
            return
        view.set_lines(lines)

    def _on_tabs_current_changed(self, _index: int) -> None:
        self.read_current_once()


def outcome_text(outcome: ResetOutcome) -> str:
    """One sentence on what a reset did."""
    count = len(outcome.removed)
    done = f"Removed {count} item{'s' if count != 1 else ''}; a fresh service is starting."
    if not outcome.failed:
        return done
    return f"{done} Could not remove: {'; '.join(outcome.failed)}"


class ResetBox(QGroupBox):
    """Reset app data: the button opens the confirmation; the outcome is shown below it."""

    def __init__(self, controller: ResetDataController, parent: QWidget | None = None) -> None:
        super().__init__("Reset", parent)
        self._controller = controller
        self.dialog = ResetDataDialog(controller, self)
        self.reset_button = QPushButton("Reset app data…")
        self.note = muted_label(RESET_NOTE)
        self.note.setWordWrap(True)
        self.outcome = QLabel()
        self.outcome.setWordWrap(True)
        self.outcome.hide()
        row = QHBoxLayout()
        row.addWidget(self.note, 1)
        row.addWidget(self.reset_button)
        layout = QVBoxLayout(self)
        layout.addLayout(row)
        layout.addWidget(self.outcome)
        self.reset_button.clicked.connect(self.dialog.open)
        controller.reset_finished.connect(self._on_controller_reset_finished)
        controller.reset_refused.connect(self._on_controller_reset_refused)

    def _show(self, text: str) -> None:
        self.outcome.setText(text)
        self.outcome.setVisible(bool(text))

    def _on_controller_reset_finished(self, outcome: ResetOutcome) -> None:
        self._show(outcome_text(outcome))

    def _on_controller_reset_refused(self, reason: str) -> None:
        self._show(reason)
