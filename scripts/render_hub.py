"""Render the Models page (with llama.cpp rows) and the model hub's Hugging Face search to PNGs,
against a scripted connection.

    .venv/bin/python scripts/render_hub.py [--out-dir /tmp/hub-screens]

Offscreen (QT_QPA_PLATFORM=offscreen) unless another platform is set; no broker runs. The page
is built as the composition root builds it (stores, nodes model, controllers, page) on a
connection whose answers are scripted: this computer has a GPU with 8 GB of VRAM and runs
Ollama and llama.cpp (serving one of its two model files). Saved: ``models.png`` (the models
with llama.cpp rows), ``hub-curated.png`` (the curated list's llama.cpp entries),
``hub-search.png`` (a search, the chosen repository's files with the suggested one, a pull in
progress under the tabs), ``hub-empty.png`` (a search without results), ``pull-finished.png``
(the line a finished pull leaves) and ``models-narrow.png`` (640 px wide).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any, TypeVar

import msgspec
from _offscreen import ScriptedConnection, render_to_out_dir, save_png, wait_until
from PySide6.QtWidgets import QWidget

from app.catalog import load_catalog
from app.controllers.hub import HubController
from app.controllers.models import ModelsController
from app.models.nodes import NodesModel
from app.pending import PendingActions
from app.stores.discovery import DiscoveryStore
from app.stores.engines import EnginesStore
from app.window.models_page import ModelsPage
from backend.protocol import methods
from backend.protocol.contract import Method
from backend.protocol.types.nodes import DiscoveredNode

P = TypeVar("P")
R = TypeVar("R")
PAGE_SIZE = (1100, 760)
SELF = "3f6c1a2e-0000-4000-8000-000000000001"
REPO = "Qwen/Qwen2.5-1.5B-Instruct-GGUF"
BASE = f"https://huggingface.co/{REPO}/resolve/main/"
SERVED = "qwen2.5-0.5b-instruct-q4_k_m"


class HubConnection(ScriptedConnection):
    """The scripted connection, but for two methods: a list of Hub search answers is answered
    in turn (its last item from then on), and a pull never answers (it stays in progress)."""

    async def call(self, method: Method[P, R], params: P | None = None, timeout: float = 10.0) -> R:
        answer = self.answers.get(method.name)
        if isinstance(answer, list) and method is methods.HUB_SEARCH:
            return method.decode_result(answer.pop(0) if len(answer) > 1 else answer[0])
        if method is methods.ENGINE_ACTION:
            await asyncio.Event().wait()
        return await super().call(method, params, timeout)


def engine(name: str, display: str, **facts: Any) -> dict[str, Any]:
    """A running engine's ``EngineStatus``."""
    return {
        "engine": name, "display_name": display, "front_door": name, "mode": "process",
        "installed": True, "state": "running", "port": 1, "default_port": 1, **facts,
    }  # fmt: skip


SELF_NODE = {
    "node_id": SELF, "name": "desk", "kind": "pair", "sources": ["self"], "addresses": [],
    "ports": {}, "engines": {}, "reachable": True,
    "telemetry": {"valid": True, "memory_total_bytes": 32_000_000_000,
                  "vram_total_bytes": 8_000_000_000},
}  # fmt: skip
FILES = [("q2_k", "Q2_K", 676), ("q4_k_m", "Q4_K_M", 1117), ("q8_0", "Q8_0", 1894),
         ("fp16", "F16", 3560)]  # fmt: skip


def answers() -> dict[str, Any]:
    """What the scripted broker answers."""
    status = {
        "version": "0.1.0", "pid": 1, "started_at": 0.0, "uptime_ms": 1, "data_dir": "/d",
        "node_id": SELF, "node_name": "desk", "control_address": "x", "log_file": None,
        "ports": {"node": 14320, "ollama": 11434, "openai": 1234, "llamacpp": 8080},
        "components": [], "errors": [],
    }  # fmt: skip
    models = {
        "models": [], "slots_by_engine": {},
        "by_engine": {"ollama": ["llama3.2:3b", "qwen3:8b"], "llamacpp": [SERVED, "tiny-llama"]},
        "loaded_by_engine": {"ollama": ["llama3.2:3b"], "llamacpp": [SERVED]},
        "sizes_by_engine": {"ollama": {"llama3.2:3b": 2_019_393_189, "qwen3:8b": 5_225_388_164},
                            "llamacpp": {SERVED: 491_400_032, "tiny-llama": 668_788_096}},
        "details_by_engine": {"llamacpp": {
            SERVED: {"architecture": "qwen2", "quantization": "Q4_K_M", "context_length": 32768},
            "tiny-llama": {"architecture": "llama", "quantization": "Q4_K_M",
                           "context_length": 2048}}},
    }  # fmt: skip
    snapshot = {
        "seq": 1, "engines": [engine("ollama", "Ollama"),
                              engine("llamacpp", "llama.cpp (llama-server)")],
        "models": models, "members": [],
    }  # fmt: skip
    found = {"models": [
        {"repo": REPO, "downloads": 268_431, "likes": 118, "updated": "2024-09-20T03:24:10Z"},
        {"repo": "bartowski/Qwen2.5-1.5B-Instruct-GGUF", "downloads": 41_002, "likes": 12,
         "updated": "2024-09-19T12:00:00Z"},
        {"repo": "unsloth/Qwen2.5-1.5B-Instruct-GGUF", "downloads": 9_870, "likes": 7,
         "updated": "2025-01-02T08:00:00Z"},
    ]}  # fmt: skip
    files = {
        "repo": REPO,
        "files": [
            {"name": f"qwen2.5-1.5b-instruct-{tag}.gguf", "size": megabytes * 1_000_000,
             "quant": quant, "url": f"{BASE}qwen2.5-1.5b-instruct-{tag}.gguf"}
            for tag, quant, megabytes in FILES
        ],
        "suggested": "qwen2.5-1.5b-instruct-q8_0.gguf",
        "reason": "Q8_0 (1.9 GB) is the largest that fits in 80% of 8.0 GB of memory, leaving "
        "the rest for the context",
    }  # fmt: skip
    return {
        methods.STATUS.name: status,
        methods.ENGINE_SUBSCRIBE.name: snapshot,
        methods.DISCOVERY_SUBSCRIBE.name: {"seq": 1, "nodes": [SELF_NODE]},
        methods.HUB_SEARCH.name: [found, {"models": []}],
        methods.HUB_FILES.name: files,
    }


async def save(widget: QWidget, out: Path) -> None:
    """Let layouts settle, then save ``widget`` to ``out``."""
    await asyncio.sleep(0.3)
    save_png(widget, out)


async def render(out_dir: Path) -> None:
    """Build the page, show the models, then search and choose a repository, then pull."""
    connection = HubConnection(answers())
    engines, discovery = EnginesStore(connection), DiscoveryStore(connection)
    nodes = NodesModel()
    nodes.load([msgspec.convert(SELF_NODE, DiscoveredNode)])
    controller = ModelsController(connection, PendingActions(), engines, discovery)
    hub = HubController(controller, nodes)
    page = ModelsPage(controller, load_catalog(), hub)
    page.resize(*PAGE_SIZE)
    page.show()
    try:
        connection.become_ready()
        await wait_until(lambda: controller.models.rowCount() == 4)
        await save(page, out_dir / "models.png")
        page.tabs.setCurrentWidget(page.hub)
        page.hub.search.setText("qwen2.5")
        await save(page, out_dir / "hub-curated.png")
        page.hub.show_hugging_face()
        view = page.hub.hugging_face
        view.search.setText("qwen2.5 1.5b instruct")
        view.search.returnPressed.emit()
        await wait_until(lambda: hub.search_state.phase == "done")
        view.results.setCurrentIndex(hub.results.index(0, 0))
        await wait_until(lambda: hub.files_state.phase == "done")
        view.pull_button.click()
        await wait_until(lambda: bool(page.pulls_panel.items))
        await save(page, out_dir / "hub-search.png")
        view.search.setText("zzz no such model")
        view.search.returnPressed.emit()
        await wait_until(lambda: hub.search_state.subject == "zzz no such model")
        await wait_until(lambda: hub.search_state.phase == "done")
        await save(page, out_dir / "hub-empty.png")
        page.tabs.setCurrentWidget(page.models_tab)
        done = {"engine": "llamacpp", "model": "qwen2.5-1.5b-instruct-q8_0", "stage": "success",
                "percent": 100.0, "done": True}  # fmt: skip
        connection.push(
            methods.ENGINE_EVENT.name, {"seq": 2, "event": "pull_progressed", "progress": done}
        )
        await wait_until(lambda: not page.pulls_panel.items)
        await save(page, out_dir / "pull-finished.png")
        page.resize(640, 480)
        await save(page, out_dir / "models-narrow.png")
    finally:
        await hub.close()
        await controller.close()
        await engines.close()
        await discovery.close()
        await connection.stop()


def main() -> int:
    """Parse arguments and render."""
    return render_to_out_dir(__doc__, Path("/tmp/hub-screens"), render)


if __name__ == "__main__":
    sys.exit(main())
