"""Render the Engines page with busy engine schedulers to a PNG, against a scripted connection.

    .venv/bin/python scripts/render_scheduler_card.py [--out /tmp/scheduler-card.png]

Offscreen (QT_QPA_PLATFORM=offscreen) unless another platform is set; no broker runs. The page
is built as the composition root builds it (stores, model, controller, page) on a connection
whose answers are scripted: this computer runs Ollama (two models sharing its slots) and
llama-server (one model at a time: a turn, a queue behind it, a delete waiting for the engine
to drain), and a paired laptop runs llama-server too (its card has no scheduler line: members'
schedulers are not mirrored). The busy state arrives as a ``scheduler_changed`` push after
the snapshot, the way the broker sends it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _offscreen import ScriptedConnection, run_on_qt, save_png, wait_until

from app.controllers.engines import EnginesController
from app.models.engines import EnginesModel
from app.pending import PendingActions
from app.stores.discovery import DiscoveryStore
from app.stores.engines import EnginesStore
from app.stores.settings import SettingsStore
from app.window.engines_page import EnginesPage
from backend.protocol import methods
from backend.protocol.types.base import EngineName, NodeId

PAGE_SIZE = (980, 1020)
SELF, LAPTOP = "3f6c1a2e-0000-4000-8000-000000000001", "9a1b7c3d-0000-4000-8000-000000000002"
DOORS = {"ollama": 11434, "openai": 1234, "llamacpp": 8080}


def engine(name: str, display: str, door: str, port: int, **facts: Any) -> dict[str, Any]:
    """A running engine's ``EngineStatus``."""
    return {
        "engine": name, "display_name": display, "front_door": door, "mode": "process",
        "installed": True, "state": "running", "port": port, "default_port": port,
        "revision": 3, "desired": True, **facts,
    }  # fmt: skip


OLLAMA = engine("ollama", "Ollama", "ollama", 11435, pid=4120, slots=4)
LLAMACPP = engine("llamacpp", "llama.cpp (llama-server)", "llamacpp", 8081, pid=4188, slots=2)
LMSTUDIO = {**engine("lmstudio", "LM Studio", "openai", 1235), "state": "stopped", "pid": None}
VERSIONS = {
    name: {"engine": name, "installed": version, "latest": version}
    for name, version in (("ollama", "0.12.3"), ("lmstudio", "0.3.30"), ("llamacpp", "b6710"))
}

BUSY = {
    "engines": [
        {
            "engine": "ollama", "ceiling": 4, "running": 3, "waiting": 1,
            "queues": [
                {"model": "llama3.2:3b", "running": 2, "waiting": 1},
                {"model": "qwen3:8b", "running": 1},
            ],
            "slot_owners": {"sessions": 2, "keyless": 1, "fresh": 1},
        },
        {
            "engine": "llamacpp", "single_model": True, "ceiling": 2, "idle": 0, "running": 2,
            "waiting": 3,
            "queues": [
                {"model": "qwen", "running": 2, "waiting": 2},
                {"model": "tiny", "waiting": 1},
            ],
            "resident": "qwen", "turn": "qwen",
            "exclusive": {"kind": "delete", "model": "tiny"},
            "slot_owners": {"sessions": 2, "fresh": 1},
        },
    ]
}  # fmt: skip


def answers() -> dict[str, Any]:
    """What the scripted broker answers."""
    status = {
        "version": "0.1.0", "pid": 1, "started_at": 0.0, "uptime_ms": 1, "data_dir": "/d",
        "node_id": SELF, "node_name": "desk", "control_address": "x", "log_file": None,
        "ports": {"node": 14320, **DOORS, "relay": 14321}, "components": [], "errors": [],
        "front_doors": {door: f"http://127.0.0.1:{port}" for door, port in DOORS.items()},
    }  # fmt: skip
    laptop = {
        "node_id": LAPTOP, "name": "laptop", "reachable": True,
        "engines": [{**LLAMACPP, "pid": 9001, "port": 8080, "default_port": 8080}],
    }  # fmt: skip
    snapshot = {
        "seq": 1, "engines": [OLLAMA, LMSTUDIO, LLAMACPP],
        "models": {"models": [], "by_engine": {}, "loaded_by_engine": {}, "slots_by_engine": {}},
        "members": [laptop], "scheduler": {"engines": []},
    }  # fmt: skip
    node = {
        "node_id": LAPTOP, "name": "laptop", "kind": "pair", "sources": ["mdns"],
        "addresses": ["192.168.1.23"], "reachable": True, "ports": {"node": 14320, **DOORS},
        "engines": {"llamacpp": {"models": ["qwen"], "loaded": ["qwen"]}},
    }  # fmt: skip
    return {
        methods.STATUS.name: status,
        methods.ENGINE_SUBSCRIBE.name: snapshot,
        methods.ENGINE_GET_INSTALLED.name: [OLLAMA, LLAMACPP],
        methods.DISCOVERY_SUBSCRIBE.name: {"seq": 1, "nodes": [node]},
        methods.ENGINE_VERSIONS.name: lambda ref: VERSIONS[ref.engine] if ref else None,
    }


@dataclass(frozen=True)
class EnginesRig:
    """The Engines page's stores, model and controller on the scripted connection, built as
    the composition root builds them."""

    connection: ScriptedConnection
    engines: EnginesStore
    discovery: DiscoveryStore
    model: EnginesModel
    controller: EnginesController

    async def close(self) -> None:
        """Close the controller and stores, then the connection."""
        await self.controller.close()
        await self.engines.close()
        await self.discovery.close()
        await self.connection.stop()


def engines_rig() -> EnginesRig:
    """A fresh rig on the scripted answers."""
    connection = ScriptedConnection(answers())
    engines, discovery = EnginesStore(connection), DiscoveryStore(connection)
    model = EnginesModel()
    controller = EnginesController(
        connection, model, PendingActions(), engines, discovery, SettingsStore(connection)
    )
    return EnginesRig(connection, engines, discovery, model, controller)


async def render(out: Path) -> None:
    """Build the page, let the snapshot and the busy push arrive, save the page."""
    rig = engines_rig()
    connection = rig.connection
    page = EnginesPage(connection, rig.model, rig.controller)
    page.resize(*PAGE_SIZE)
    page.show()
    try:
        connection.become_ready()
        llamacpp = EngineName("llamacpp")
        cards = (NodeId(SELF), llamacpp), (NodeId(LAPTOP), llamacpp)
        await wait_until(lambda: None not in [page.card(*card) for card in cards])
        busy = {"seq": 2, "event": "scheduler_changed", "scheduler": BUSY}
        connection.push(methods.ENGINE_EVENT.name, busy)
        await asyncio.sleep(0.4)  # layouts settle
        save_png(page, out)
    finally:
        await rig.close()


def main() -> int:
    """Parse arguments and render."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("/tmp/scheduler-card.png"))
    arguments = parser.parse_args()
    run_on_qt(lambda: render(arguments.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
