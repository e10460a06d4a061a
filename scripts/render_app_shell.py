"""Render the app shell's screens to PNGs against a scripted connection, to look at them.

    .venv/bin/python scripts/render_app_shell.py [--out-dir /tmp/app-shell]

Offscreen unless another platform is set; no broker runs. Saves ``endpoints.png`` (the API
endpoints window with the client settings and the node API), ``banners.png`` (one problem that
three computers report, then more than fit), ``api-key.png`` (a new key's client settings) and
``min-<page>.png``: every page of the main window, built as the composition root builds it, at
the window's minimum size.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import msgspec  # noqa: E402
import qasync  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from app.application import PairApplication  # noqa: E402
from app.controllers.cluster_page import NewKey  # noqa: E402
from app.controllers.components import ComponentsController  # noqa: E402
from app.controllers.endpoints import EndpointsController  # noqa: E402
from app.controllers.errors import ErrorsController  # noqa: E402
from app.models.components import ComponentsModel  # noqa: E402
from app.models.errors import ErrorsModel  # noqa: E402
from app.options import AppOptions  # noqa: E402
from app.stores.components import ComponentsStore  # noqa: E402
from app.stores.discovery import DiscoveryStore  # noqa: E402
from app.stores.engines import EnginesStore  # noqa: E402
from app.stores.settings import SettingsStore  # noqa: E402
from app.window.banners import ErrorBanners  # noqa: E402
from app.window.cluster_dialogs import SecretDialog  # noqa: E402
from app.window.endpoints_window import EndpointsWindow  # noqa: E402
from app.window.main_window import MINIMUM_SIZE  # noqa: E402
from backend.protocol import methods  # noqa: E402
from backend.protocol.types.apikeys import ApiKeyInfo  # noqa: E402
from tests.gui.helpers import EngineEvents, FakeConnection, settle  # noqa: E402

DOORS = {"ollama": "http://127.0.0.1:11434", "openai": "http://127.0.0.1:1234",
         "llamacpp": "http://127.0.0.1:8080"}  # fmt: skip
HERE = {"node_id": "n1", "name": "gaming-pc", "kind": "pair", "sources": ["self"],
        "addresses": ["192.168.1.20"], "ports": {}, "engines": {}, "reachable": True}  # fmt: skip
STATUS = {"version": "0.1.0", "pid": 4242, "started_at": 1.0, "uptime_ms": 10, "data_dir": "/d",
          "node_id": "n1", "node_name": "gaming-pc", "control_address": "/c", "log_file": None,
          "ports": {"node": 14320, "ollama": 11434, "openai": 1234, "llamacpp": 8080},
          "components": [], "errors": [], "front_doors": DOORS}  # fmt: skip
MANUAL = ("The manual node 127.0.0.1:58815 has not answered 3 probes in a row (Cannot connect "
          "to host 127.0.0.1:58815 ssl:<ssl.SSLContext object at 0x7fed1df7e330>).")  # fmt: skip


def error(node: str, error_id: str, message: str, severity: str = "warning") -> dict[str, Any]:
    return {"id": error_id, "node_id": node, "message": message, "severity": severity,
            "created_at": 1.0, "updated_at": 1.0}  # fmt: skip


async def render_endpoints(out: Path) -> None:
    connection = FakeConnection()
    engines, settings = EnginesStore(connection), SettingsStore(connection)
    discovery = DiscoveryStore(connection)
    controller = EndpointsController(
        connection, engines, settings, discovery=discovery, interfaces=lambda: ["10.0.0.7"]
    )
    window = EndpointsWindow(controller)
    connection.script(methods.DISCOVERY_SUBSCRIBE, {"seq": 1, "nodes": [HERE]})
    connection.script(methods.STATUS, STATUS)
    models = {"models": ["llama3.2:3b"], "by_engine": {"ollama": ["llama3.2:3b"]},
              "loaded_by_engine": {}, "slots_by_engine": {}}  # fmt: skip
    EngineEvents(connection).script(models=models)
    connection.become_ready()
    await asyncio.sleep(0.5)
    window.resize(720, 1180)
    window.show()
    await settle()
    window.grab().save(str(out / "endpoints.png"))
    window.close()
    await controller.close()


async def render_banners(out: Path) -> None:
    connection = FakeConnection()
    store = ComponentsStore(connection)
    components = ComponentsController(connection, ComponentsModel(), store)
    engines, discovery = EnginesStore(connection), DiscoveryStore(connection)
    errors = ErrorsController(
        connection, ErrorsModel(), components, engines=engines, discovery=discovery
    )
    banners = ErrorBanners(errors.model, errors)
    members = [{"node_id": "n2", "name": "laptop", "reachable": True},
               {"node_id": "n3", "name": "gpu-box", "reachable": True}]  # fmt: skip
    connection.script(methods.ENGINE_SUBSCRIBE, EngineEvents(connection).snapshot(members=members))
    connection.script(methods.DISCOVERY_SUBSCRIBE, {"seq": 1, "nodes": [HERE]})
    connection.script(methods.ERRORS_GET_INITIAL, [])
    connection.become_ready()
    await asyncio.sleep(0.3)
    reports = [error(node, "discovery:manual", MANUAL) for node in ("n1", "n2", "n3")]
    reports += [error("n1", f"e{i}", f"Problem number {i}", "error") for i in range(5)]
    connection.push(methods.ERRORS_UPDATE, reports)
    banners.resize(760, banners.sizeHint().height())
    banners.show()
    await settle()
    banners.resize(760, banners.sizeHint().height())
    banners.grab().save(str(out / "banners.png"))
    banners.close()


def render_key_dialog(out: Path) -> None:
    info = msgspec.convert(
        {"id": "k1", "name": "laptop", "prefix": "pair-AbCd", "created_at": 1.0}, ApiKeyInfo
    )
    key = NewKey(info, "pair-" + "S" * 43, "192.168.1.20", 1234, 11434, True, 8080)
    dialog = SecretDialog(key)
    dialog.show()
    dialog.grab().save(str(out / "api-key.png"))
    dialog.close()


async def render_minimum_size(out: Path, data_dir: Path) -> None:
    app = PairApplication(AppOptions(data_dir), use_tray=False, open_url=lambda _url: True)
    window = app.window
    window.resize(MINIMUM_SIZE)
    window.show()
    for name in list(window._page_names):
        window.show_page(name)
        await settle()
        window.grab().save(str(out / f"min-{name}.png"))
    await app.shutdown()


async def main(out: Path) -> None:
    await render_endpoints(out)
    await render_banners(out)
    render_key_dialog(out)
    await render_minimum_size(out, out / "node")
    print(f"saved to {out}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=Path("/tmp/app-shell"))
    out_dir = parser.parse_args().out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    qt_app = QApplication(["pair"])
    qt_app.setQuitOnLastWindowClosed(False)
    with asyncio.Runner(loop_factory=lambda: qasync.QEventLoop(qt_app)) as runner:
        runner.run(main(out_dir))
