"""The Cluster page's LAN access box: the ``lan_access`` switch and the LAN API keys."""

from __future__ import annotations

from PySide6.QtCore import QSignalBlocker
from PySide6.QtWidgets import (
    QCheckBox,
    QGroupBox,
    QHBoxLayout,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.controllers.cluster_page import ClusterPageController, NewKey
from app.window.cluster_dialogs import Prompts, SecretDialog
from app.window.cluster_parts import (
    LAN_NOTE,
    NO_KEYS,
    Notice,
    revoke_text,
    selected_row,
)
from app.window.network_privacy import (
    PUBLIC_LAN_REASON,
    lan_switch_shown,
    reason_label,
)
from app.window.settings_general import error_label, show_error
from app.window.widgets import SPACE_TIGHT, FittedTable, muted_label
from backend.protocol.types.apikeys import ApiKeyInfo


class LanAccessBox(QGroupBox):
    """The ``lan_access`` switch and the LAN API keys: create (secret shown once), revoke."""

    def __init__(
        self, controller: ClusterPageController, prompts: Prompts, parent: QWidget | None = None
    ) -> None:
        super().__init__("LAN access", parent)
        self._controller = controller
        self._prompts = prompts
        self.secret_dialog: SecretDialog | None = None
        self.switch = QCheckBox("Let other computers use this computer's front doors")
        self.switch_error = error_label()
        self.public_reason = reason_label(PUBLIC_LAN_REASON)
        self.table = FittedTable(controller.keys, stretch=2, minimum_rows=1, maximum_rows=6)
        self.no_keys = muted_label(NO_KEYS)
        self.create_button = QPushButton("Create key…")
        self.revoke_button = QPushButton("Revoke…")
        self.revoke_button.setToolTip("Revoke the key selected in the table")
        self.notice = Notice()
        layout = QVBoxLayout(self)
        layout.addWidget(self.switch)
        note = QVBoxLayout()
        note.setContentsMargins(self.switch_indent(), 0, 0, 0)
        note.addWidget(self.public_reason)
        note.addWidget(muted_label(LAN_NOTE))
        note.addWidget(self.switch_error)
        layout.addLayout(note)
        layout.addSpacing(SPACE_TIGHT)
        layout.addWidget(self.table)
        layout.addWidget(self.no_keys)
        buttons = QHBoxLayout()
        buttons.addWidget(self.create_button)
        buttons.addWidget(self.revoke_button)
        buttons.addStretch(1)
        layout.addLayout(buttons)
        layout.addWidget(self.notice)
        self._connect()

    def _connect(self) -> None:
        controller = self._controller
        self.switch.toggled.connect(self._on_switch_toggled)
        self.create_button.clicked.connect(self._on_create_button_clicked)
        self.revoke_button.clicked.connect(self._on_revoke_button_clicked)
        self.table.selectionModel().selectionChanged.connect(self._on_table_selection_changed)
        for signal in (controller.keys.rowsInserted, controller.keys.rowsRemoved,
                       controller.keys.modelReset):  # fmt: skip
            signal.connect(self._on_keys_rows_changed)
        controller.lan_access_failed.connect(self._on_controller_lan_access_failed)
        controller.key_created.connect(self._on_controller_key_created)
        controller.key_revoked.connect(self._on_controller_key_revoked)
        controller.keys_failed.connect(self.notice.warn)

    def switch_indent(self) -> int:
        """Where the switch's text starts, to line its note up under it."""
        style = self.switch.style()
        indicator = style.pixelMetric(style.PixelMetric.PM_IndicatorWidth)
        spacing = style.pixelMetric(style.PixelMetric.PM_CheckBoxLabelSpacing)
        return indicator + spacing

    def refresh(self, ready: bool) -> None:
        """Show the saved ``lan_access``; commands only while ``ready``."""
        public = self._controller.privacy.public_network
        checked, changeable = lan_switch_shown(self._controller.lan_access, public)
        with QSignalBlocker(self.switch):
            self.switch.setChecked(checked)
        self.switch.setEnabled(ready and changeable)
        self.public_reason.setVisible(public)
        self.create_button.setEnabled(ready)
        self._on_keys_rows_changed()

    def _on_keys_rows_changed(self, *_args: object) -> None:
        empty = self._controller.keys.rowCount() == 0
        self.table.setVisible(not empty)
        self.no_keys.setVisible(empty)
        self.table.fit()
        self._on_table_selection_changed()

    def _on_table_selection_changed(self, *_args: object) -> None:
        key = selected_row(self.table)
        self.revoke_button.setEnabled(self.create_button.isEnabled() and key is not None)

    def _on_switch_toggled(self, on: bool) -> None:
        show_error(self.switch_error, "")
        self._controller.set_lan_access(on)

    def _on_controller_lan_access_failed(self, message: str) -> None:
        show_error(self.switch_error, message)

    def _on_create_button_clicked(self) -> None:
        name = self._prompts.key_name(self)
        if name is not None:
            self.notice.say(f"Creating the key {name}…")
            self._controller.create_key(name)

    def _on_revoke_button_clicked(self) -> None:
        key = selected_row(self.table)
        if not isinstance(key, ApiKeyInfo):
            return
        if self._prompts.confirm(self, f"Revoke {key.name}?", revoke_text(key), "Revoke"):
            self._controller.revoke_key(key.id)

    def _on_controller_key_created(self, key: NewKey) -> None:
        self.notice.say(f"Created the key {key.info.name}.")
        dialog = self.secret_dialog = SecretDialog(key, self)
        dialog.finished.connect(self._on_secret_dialog_finished)
        dialog.open()

    def _on_secret_dialog_finished(self, _result: int) -> None:
        self.secret_dialog = None

    def _on_controller_key_revoked(self, name: str) -> None:
        self.notice.say(f"Revoked the key {name}: it is refused from now on.")
