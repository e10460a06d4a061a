"""Render the Models page with models spread across members, and the "Load spread across
members" dialog showing the broker's refusal, to PNGs against a scripted connection.

    .venv/bin/python scripts/render_spread.py [--out-dir docs/screenshots]

Offscreen (QT_QPA_PLATFORM=offscreen) unless another platform is set; no broker runs. This
computer (gaming-pc) runs a 70B model spread over itself and mac-mini; the member workstation
runs a 72B model whose spread lost laptop (degraded). Saved: ``models-spread.png`` (the page)
and ``load-across.png`` (the dialog for another model, mac-mini ticked, laptop unreachable,
refused for lack of memory).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from _models_page import models_page
from _offscreen import render_to_out_dir, save_png, wait_until

from app.pending import PendingKey
from backend.protocol import methods
from backend.protocol.errors import Conflict
from backend.protocol.types.base import EngineName, NodeId

PAGE_SIZE = (1500, 520)
SELF = "3f6c1a2e-0000-4000-8000-000000000001"
MAC = "3f6c1a2e-0000-4000-8000-000000000002"
STUDIO = "3f6c1a2e-0000-4000-8000-000000000003"
LAPTOP = "3f6c1a2e-0000-4000-8000-000000000004"
BIG, OTHER, HUGE = "llama-3.3-70b-instruct-q4_k_m", "mixtral-8x22b-q4_k_m", "qwen2.5-72b-q4_k_m"
REFUSAL = (
    "the model needs 85.6 GB; the members have 52.3 GB free together (after keeping 10 % of "
    "each free)"
)
GB = 1_000_000_000


def llama(**facts: Any) -> dict[str, Any]:
    """A running llama.cpp's ``EngineStatus``."""
    return {
        "engine": "llamacpp", "display_name": "llama.cpp (llama-server)", "front_door": "openai",
        "mode": "process", "installed": True, "state": "running", "port": 8081,
        "default_port": 8081, "backend": "CUDA 12.4", **facts,
    }  # fmt: skip


def listing(names: list[str], loaded: str, sizes: dict[str, int]) -> dict[str, Any]:
    """A node's llama.cpp model files, one of them served."""
    return {
        "models": names, "by_engine": {"llamacpp": names},
        "loaded_by_engine": {"llamacpp": [loaded]}, "slots_by_engine": {},
        "sizes_by_engine": {"llamacpp": sizes},
    }  # fmt: skip


def share(node: str, name: str, layers: int, size: float, memory: str, host: bool = False) -> Any:
    """One member's share of a spread model."""
    return {"node": node, "name": name, "layers": layers, "bytes": int(size * GB),
            "memory": memory, "host": host}  # fmt: skip


def member(node: str, name: str, reachable: bool, **rest: Any) -> dict[str, Any]:
    """Another member's ``MemberEngines``."""
    return {"node_id": node, "name": name, "reachable": reachable, "engines": [], **rest}


def answers() -> dict[str, Any]:
    """What the scripted broker answers."""
    status = {
        "version": "0.1.0", "pid": 1, "started_at": 0.0, "uptime_ms": 1, "data_dir": "/d",
        "node_id": SELF, "node_name": "gaming-pc", "control_address": "x", "log_file": None,
        "ports": {"node": 14320, "ollama": 11434, "openai": 1234, "llamacpp": 8080},
        "components": [], "errors": [],
    }  # fmt: skip
    running = {"model": BIG, "state": "running", "shares": [
        share(SELF, "gaming-pc", 33, 16.5, "vram", host=True),
        share(MAC, "mac-mini", 47, 23.5, "ram"),
    ]}  # fmt: skip
    degraded = {"model": HUGE, "state": "degraded", "shares": [
        share(STUDIO, "workstation", 50, 28.0, "vram", host=True),
        share(LAPTOP, "laptop", 30, 16.8, "ram"),
    ], "reason": "laptop went away; the members left cannot hold it: the model needs "
                 "46.2 GB; the members have 30.6 GB free together (after keeping 10 % of "
                 "each free)"}  # fmt: skip
    studio_models = listing([HUGE], HUGE, {HUGE: int(44.8 * GB)})
    members = [
        member(MAC, "mac-mini", True),
        member(STUDIO, "workstation", True, engines=[llama(spread=degraded)], models=studio_models),
        member(LAPTOP, "laptop", False),
    ]
    snapshot = {
        "seq": 1, "engines": [llama(spread=running)], "members": members,
        "models": listing([BIG, OTHER], BIG, {BIG: 40 * GB, OTHER: int(85.6 * GB)}),
    }  # fmt: skip

    def refuse(_params: object) -> None:
        raise Conflict(REFUSAL)

    return {
        methods.STATUS.name: status,
        methods.ENGINE_SUBSCRIBE.name: snapshot,
        methods.DISCOVERY_SUBSCRIBE.name: {"seq": 1, "nodes": []},
        methods.ENGINE_ACTION.name: refuse,
    }


async def render(out_dir: Path) -> None:
    """Build the page, save it, then open the dialog for the unloaded model and try it."""
    async with models_page(answers(), PAGE_SIZE, rows=3) as shown:
        save_png(shown.page, out_dir / "models-spread.png")
        key = PendingKey(NodeId(SELF), EngineName("llamacpp"), OTHER)
        row = shown.controller.models.get(key)
        assert row is not None
        dialog = shown.page.models_tab.open_spread_dialog(row)
        dialog.boxes[MAC].setChecked(True)
        dialog.load_button.click()
        await wait_until(lambda: dialog.message.text() == REFUSAL)
        await asyncio.sleep(0.3)
        save_png(dialog, out_dir / "load-across.png")


def main() -> int:
    """Parse arguments and render."""
    return render_to_out_dir(__doc__, Path("docs/screenshots"), render)


if __name__ == "__main__":
    sys.exit(main())
