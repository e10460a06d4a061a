"""Render Settings → Service and its "Reset app data" confirmation to PNGs, against a scripted
connection.

    .venv/bin/python scripts/render_service_page.py [--out-dir /tmp/service-page]

Offscreen (QT_QPA_PLATFORM=offscreen) unless another platform is set; no broker runs. A
temporary data folder holds a service log, an app log and a 1.2 GB (sparse) llama.cpp model,
so the log viewer and the dialog's model size show real values. It saves ``service-page.png``
(the whole page, a placeholder standing in the inference check's slot),
``service-page-demo.png`` (the status box as ``pair demo`` shows it),
``reset-data-dialog.png`` and ``general-front-doors.png`` (Settings → General's front doors
with the ports the doors listen on, the llama.cpp door's included).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

from _offscreen import ScriptedConnection, render_to_out_dir, wait_until
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QLabel, QWidget

from app.autostart import xdg_autostart
from app.controllers.endpoints import DOOR_PORTS, EndpointsController, FrontDoorSettingsController
from app.controllers.service import ServiceController
from app.models.components import ComponentsModel
from app.stores.engines import EnginesStore
from app.stores.settings import SettingsStore
from app.window.service_page import ServicePage
from app.window.settings_general import GeneralSettings
from backend.protocol import methods

PAGE_SIZE = (900, 1700)
LOG_LINES = [
    "2026-12-04 23:41:32,857 INFO    [broker] backend.core.store: database pair.db created",
    "2026-12-04 23:41:32,932 INFO    [broker] backend.components.nodeinfo.server: node API "
    "listening on 0.0.0.0:14320",
    "2026-12-04 23:41:34,078 INFO    [broker] backend.core.worker: [proxy] serving front "
    "doors: ollama, openai, llamacpp",
    "2026-12-04 23:41:34,958 INFO    [broker] backend.broker: broker ready (pid 30383)",
]


def answers() -> dict[str, Any]:
    """What the scripted broker answers: its version and the log level setting."""
    schema = [
        {"key": "log_level", "type": "enum", "default": "info", "description": "d",
         "choices": ["debug", "info", "warning", "error"]},
    ]  # fmt: skip
    return {
        methods.VERSION.name: {
            "version": "0.1.0",
            "protocol": 1,
            "python": "3.11.7",
            "platform": "Linux",
            "commit": "509b28a",
        },
        methods.SETTINGS_GET.name: {"values": {"log_level": "info"}, "schema": schema},
    }


def fill_data_dir(data_dir: Path) -> None:
    """Logs to view and a model to size (sparse: it takes no disk)."""
    logs = data_dir / "logs"
    logs.mkdir(parents=True)
    (logs / "broker.log").write_text("\n".join(LOG_LINES) + "\n")
    (logs / "app.log").write_text("2026-12-04 23:41:31,002 INFO app: PAIR app 0.1.0\n")
    store = data_dir / "models" / "llamacpp"
    store.mkdir(parents=True)
    with (store / "qwen2.5-1.5b-instruct-q4_k_m.gguf").open("wb") as model:
        model.truncate(1_200_000_000)
    (data_dir / "pair.db").write_bytes(b"")
    (data_dir / "settings.json").write_text("{}")


async def save(widget: QWidget, path: Path) -> None:
    """Let layouts settle, then save ``widget``."""
    await asyncio.sleep(0.4)
    if not widget.grab().save(str(path)):
        raise OSError(f"could not write {path}")
    print(f"saved {path}")


async def render_page(data_dir: Path, out_dir: Path, *, demo: bool) -> None:
    """Build the page on a scripted connection and save it (the demo: its status box only)."""
    connection = ScriptedConnection(answers())
    settings = SettingsStore(connection)
    service = ServiceController(connection, settings, data_dir, lambda _url: True, demo=demo)
    page = ServicePage(connection, service, ComponentsModel())
    page.add_check_widget(QLabel("(the inference check goes here)"))
    page.resize(*PAGE_SIZE)
    page.show()
    try:
        connection.become_ready()
        viewer = page.logs_viewer.views["service"]
        await wait_until(lambda: "broker ready" in viewer.text.toPlainText())
        await wait_until(lambda: service.info.broker_version is not None)
        if demo:
            await save(page.status_box, out_dir / "service-page-demo.png")
            return
        await save(page, out_dir / "service-page.png")
        dialog = page.reset_box.dialog
        page.reset_box.reset_button.click()
        await wait_until(lambda: dialog.models_check.isEnabled())
        await save(dialog, out_dir / "reset-data-dialog.png")
        dialog.reject()
    finally:
        await page.close_tasks()
        for closing in (service, settings):
            await closing.close()
        await connection.stop()


def general_answers() -> dict[str, Any]:
    """The broker's answers for the General tab: the doors at moved ports, the port settings."""
    doors = {"ollama": 47533, "openai": 44513, "llamacpp": 48080}
    status = {
        "version": "0.1.0", "pid": 4242, "started_at": 1.0, "uptime_ms": 10, "data_dir": "/d",
        "node_id": "n1", "node_name": "pc", "control_address": "/c", "log_file": None,
        "ports": {"node": 14320, "ollama": 11434, "openai": 1234, "llamacpp": 8080},
        "components": [], "errors": [],
        "front_doors": {door: f"http://127.0.0.1:{port}" for door, port in doors.items()},
    }  # fmt: skip
    schema = [
        {"key": key, "type": "int", "default": 0, "minimum": 0, "maximum": 65535,
         "description": "d"}
        for key in DOOR_PORTS.values()
    ] + [
        {"key": key, "type": "float", "default": 120.0, "minimum": 1.0, "maximum": 3600.0,
         "description": "d"}
        for key in ("proxy_header_timeout_s", "proxy_first_content_timeout_s")
    ] + [
        {"key": "proxy_pinned_node", "type": "string", "default": "", "description": "d"},
        {"key": "placement_policy", "type": "enum", "default": "pair", "description": "d",
         "choices": ["pair", "reference"]},
    ]  # fmt: skip
    values: dict[str, Any] = {
        **dict.fromkeys(DOOR_PORTS.values(), 0),
        "proxy_header_timeout_s": 120.0,
        "proxy_first_content_timeout_s": 120.0,
        "proxy_pinned_node": "",
        "placement_policy": "pair",
    }
    return {
        methods.STATUS.name: status,
        methods.SETTINGS_GET.name: {"values": values, "schema": schema},
        methods.DISCOVERY_GET_NODES.name: [],
    }


async def render_general(out_dir: Path, folder: Path) -> None:
    """Settings → General with the doors' real ports; saves the front doors box."""
    connection = ScriptedConnection(general_answers())
    engines, settings = EnginesStore(connection), SettingsStore(connection)
    controller = FrontDoorSettingsController(connection, settings)
    endpoints = EndpointsController(connection, engines, settings)
    preferences = QSettings(str(folder / "PAIR.ini"), QSettings.Format.IniFormat)
    autostart = xdg_autostart(folder / "config", ["/usr/bin/pair-gui"])
    tab = GeneralSettings(
        controller, autostart, preferences, tray_available=True, endpoints=endpoints
    )
    tab.resize(800, 1000)
    tab.show()
    try:
        connection.become_ready()
        spin = tab.front_doors_box.port_spins[DOOR_PORTS["llamacpp"]]
        await wait_until(lambda: spin.value() == 48080)
        await save(tab.front_doors_box, out_dir / "general-front-doors.png")
    finally:
        for closing in (controller, endpoints, engines, settings):
            await closing.close()
        await connection.stop()


async def render(out_dir: Path) -> None:
    """Render the page, the demo's status box, the dialog and the General tab's doors."""
    with tempfile.TemporaryDirectory(prefix="pair-service-page-") as folder:
        data_dir = Path(folder) / "node"
        fill_data_dir(data_dir)
        await render_page(data_dir, out_dir, demo=False)
        await render_page(data_dir, out_dir, demo=True)
        await render_general(out_dir, Path(folder))


def main() -> int:
    """Parse arguments and render."""
    return render_to_out_dir(__doc__, Path("/tmp/service-page"), render)


if __name__ == "__main__":
    sys.exit(main())
