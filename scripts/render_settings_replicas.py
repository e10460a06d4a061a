"""Render Settings → General's Replicas box to a PNG, against a scripted connection.

    .venv/bin/python scripts/render_settings_replicas.py [--out-dir build/screens]

Offscreen (QT_QPA_PLATFORM=offscreen) unless another platform is set; no broker runs. The tab is
built as the composition root builds it (settings store, controller, tab) on a connection whose
``settings:get`` answers the broker's real schema with replicas on automatic, a 15 s target
wait and an hour before an unused copy is unloaded. It saves ``settings-replicas.png``: the
Replicas box only, cut from the tab, with a refusal of the broker shown under its last field.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import msgspec
from _offscreen import ScriptedConnection, render_to_out_dir, wait_until
from PySide6.QtCore import QRect, QSettings

from app.autostart import xdg_autostart
from app.controllers.endpoints import FrontDoorSettingsController
from app.stores.settings import SettingsStore
from app.window.settings_general import GeneralSettings
from app.window.settings_replicas import REPLICAS_MAX, REPLICAS_TARGET_WAIT, REPLICAS_TTL
from backend.components.settings import schema
from backend.protocol import methods

TAB_SIZE = (760, 1500)
MARGIN = 12
REFUSAL = "Must be at most 16; got 20."


def answers() -> dict[str, Any]:
    """The broker's settings with the replicas ones changed from their defaults."""
    values = schema.defaults() | {REPLICAS_TARGET_WAIT: 15.0, REPLICAS_TTL: 3600.0}
    snapshot = {"values": values, "schema": msgspec.to_builtins(schema.SCHEMA)}
    return {methods.SETTINGS_GET.name: snapshot, methods.DISCOVERY_GET_NODES.name: []}


async def render(out_dir: Path) -> None:
    """Build the tab, let the settings arrive, show a refusal, save the Replicas box."""
    connection = ScriptedConnection(answers())
    settings = SettingsStore(connection)
    controller = FrontDoorSettingsController(connection, settings)
    preferences = QSettings(str(out_dir / "render-prefs.ini"), QSettings.Format.IniFormat)
    autostart = xdg_autostart(out_dir / "render-config", ["/usr/bin/pair-gui"])
    tab = GeneralSettings(controller, autostart, preferences, tray_available=True, demo=False)
    tab.resize(*TAB_SIZE)
    tab.show()
    try:
        connection.become_ready()
        box = tab.replicas_box
        await wait_until(lambda: box.mode_combo.isEnabled())
        controller.value_rejected.emit(REPLICAS_MAX, REFUSAL)
        await asyncio.sleep(0.4)  # layouts settle
        body = tab.widget()
        assert body is not None
        top, bottom = box.geometry().top() - MARGIN, box.geometry().bottom() + MARGIN
        out = out_dir / "settings-replicas.png"
        if not body.grab(QRect(0, top, body.width(), bottom - top)).save(str(out)):
            raise OSError(f"could not write {out}")
        print(f"saved {out}")
    finally:
        await controller.close()
        await settings.close()
        await connection.stop()


def main() -> int:
    """Parse arguments and render."""
    return render_to_out_dir(__doc__, Path("build/screens"), render)


if __name__ == "__main__":
    sys.exit(main())
