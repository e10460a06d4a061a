"""Render the Welcome dialog's steps to PNGs, on a scripted connection (no broker runs).

    .venv/bin/python scripts/render_welcome.py [--out-dir /tmp/welcome]

Offscreen (QT_QPA_PLATFORM=offscreen) unless another platform is set. The controllers are built
as the composition root builds them; this computer has 16 GB of RAM, llama.cpp installed and
stopped, Ollama running without models. Saves ``welcome-offer.png`` (the model offered, Pull),
``welcome-pulling.png`` (its download at 40 %), ``welcome-ready.png`` (loaded, Try it enabled)
and ``welcome-have-one.png`` (a computer that already has a model: straight to Try it).
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

from app.catalog import load_catalog  # noqa: E402
from app.controllers.activity import ActivityController  # noqa: E402
from app.controllers.endpoints import EndpointsController  # noqa: E402
from app.controllers.models import ModelsController  # noqa: E402
from app.controllers.welcome_model import FirstModelController  # noqa: E402
from app.models.errors import ErrorsModel  # noqa: E402
from app.models.nodes import NodesModel  # noqa: E402
from app.pending import PendingActions  # noqa: E402
from app.stores.settings import SettingsStore  # noqa: E402
from app.window.welcome import WelcomeDialog  # noqa: E402
from backend.protocol import methods  # noqa: E402
from backend.protocol.types.nodes import DiscoveredNode  # noqa: E402
from tests.gui.helpers import EngineEvents, FakeConnection, Stores, wait_until  # noqa: E402
from tests.gui.test_welcome import DOORS, engine, listed, status  # noqa: E402

MODEL = "qwen2.5-1.5b-instruct-q4_k_m"
THIS_COMPUTER = {
    "node_id": "n1", "name": "desk", "kind": "pair", "sources": ["self"], "addresses": [],
    "ports": {}, "engines": {}, "reachable": True,
    "telemetry": {"valid": True, "memory_total_bytes": 16_000_000_000},
}  # fmt: skip


class Scene:
    """One dialog on its own scripted session."""

    def __init__(self, engines: list[dict[str, Any]], models: dict[str, Any] | None) -> None:
        self.connection = connection = FakeConnection()
        self.stores = stores = Stores.build(connection)
        self.activity = ActivityController(connection, ErrorsModel(), stores.jobs, stores.engines)
        self.settings = SettingsStore(connection)
        self.endpoints = EndpointsController(connection, stores.engines, self.settings)
        self.models = ModelsController(
            connection, PendingActions(), stores.engines, stores.discovery
        )
        nodes = NodesModel()
        nodes.upsert(msgspec.convert(THIS_COMPUTER, DiscoveredNode))
        self.first_model = FirstModelController(self.models, nodes, self.activity, load_catalog())
        self.events = EngineEvents(connection)
        for _ in range(4):
            connection.script(methods.STATUS, status(DOORS))
            EngineEvents(connection).script(*engines, models=models)
        self.dialog = WelcomeDialog(self.activity, self.endpoints, self.first_model)

    async def open(self) -> WelcomeDialog:
        """Start the session and show the dialog once the engines are listed."""
        self.connection.become_ready()
        self.dialog.show()
        await wait_until(lambda: self.models.node_id is not None, 5, "the node id")
        await wait_until(lambda: bool(self.dialog.engine_rows.names), 5, "the engines")
        await asyncio.sleep(0.1)
        return self.dialog

    async def close(self) -> None:
        """Close the dialog and everything under it."""
        self.dialog.close()
        for controller in (self.activity, self.endpoints, self.models):
            await controller.close()
        await self.stores.close()
        await self.settings.close()
        await self.connection.stop()


async def _save(dialog: WelcomeDialog, path: Path) -> Path:
    await asyncio.sleep(0.2)  # the layouts settle on their new contents
    dialog.grab().save(str(path))
    return path


async def render(out_dir: Path) -> list[Path]:
    """Render the four states; the PNGs written."""
    written: list[Path] = []
    engines = [engine("llamacpp", "stopped"), engine("ollama", "running")]
    scene = Scene(engines, None)
    try:
        dialog = await scene.open()
        written.append(await _save(dialog, out_dir / "welcome-offer.png"))
        scene.connection.script(methods.ENGINE_ACTION, asyncio.get_running_loop().create_future())
        dialog.first_model.pull_button.click()
        scene.events.pull(
            {"engine": "llamacpp", "model": MODEL, "stage": "downloading", "percent": 40.0,
             "completed": 448_000_000, "total": 1_120_000_000}
        )  # fmt: skip
        await wait_until(lambda: dialog.first_model.progress.value() == 40, 5, "the progress")
        written.append(await _save(dialog, out_dir / "welcome-pulling.png"))
        scene.events.pull({"engine": "llamacpp", "model": MODEL, "stage": "done", "done": True})
        scene.events.models(listed("llamacpp", MODEL, loaded=(MODEL,)))
        await wait_until(dialog.try_box.try_button.isEnabled, 5, "ready")
        written.append(await _save(dialog, out_dir / "welcome-ready.png"))
    finally:
        await scene.close()
    scene = Scene(engines, listed("ollama", "llama3.2:3b"))
    try:
        dialog = await scene.open()
        await wait_until(dialog.try_box.try_button.isEnabled, 5, "the model found")
        written.append(await _save(dialog, out_dir / "welcome-have-one.png"))
    finally:
        await scene.close()
    return written


def main() -> int:
    """Render into ``--out-dir`` and print the files."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out-dir", type=Path, default=Path("/tmp/welcome"))
    options = parser.parse_args()
    options.out_dir.mkdir(parents=True, exist_ok=True)
    qt_app = QApplication.instance() or QApplication([])
    assert isinstance(qt_app, QApplication)
    qt_app.setQuitOnLastWindowClosed(False)
    with asyncio.Runner(loop_factory=lambda: qasync.QEventLoop(qt_app)) as runner:
        for path in runner.run(render(options.out_dir)):
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
