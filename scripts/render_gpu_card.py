"""Render the Overview's node cards and the Engines page with GPU figures to PNGs.

    .venv/bin/python scripts/render_gpu_card.py [--out-dir /tmp/gpu-card]

Offscreen (QT_QPA_PLATFORM=offscreen) unless another platform is set; no broker runs. The
Overview shows this computer (an NVIDIA GeForce RTX 4090 with 24 GB, five minutes of history)
beside a paired laptop without a GPU; the Engines page, built like the scheduler card's
(``render_scheduler_card.py``: its scripted broker), shows the GPU line under this computer's
header, a busy scheduler line (its room is kept while idle) and a refused port beside its field.
Writes ``overview.png`` and ``engines.png``.
"""

from __future__ import annotations

import asyncio
import math
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "scripts"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import msgspec  # noqa: E402
from _offscreen import render_to_out_dir, save_png, wait_until  # noqa: E402
from render_scheduler_card import (  # noqa: E402
    BUSY,
    DOORS,
    LAPTOP,
    SELF,
    answers,
    engines_rig,
)

from app.models.nodes import NodesModel  # noqa: E402
from app.window.engines_page import EnginesPage  # noqa: E402
from app.window.overview_page import OverviewPage  # noqa: E402
from backend.protocol import methods  # noqa: E402
from backend.protocol.types.base import EngineName, NodeId  # noqa: E402
from backend.protocol.types.engines import EngineStatus  # noqa: E402
from backend.protocol.types.nodes import DiscoveredNode, NodeInfo, NodeTelemetry  # noqa: E402

GIB = 1024**3
NOW = 1_790_000_000.0
SAMPLES = 150  # five minutes at the 2 s telemetry interval
OVERVIEW_SIZE = (900, 760)
ENGINES_SIZE = (980, 900)


def gpu(load: float, vram_gib: float) -> dict[str, Any]:
    """The RTX 4090 as node-info lists it."""
    return {"vendor": "nvidia", "name": "NVIDIA GeForce RTX 4090",
            "vram_total_bytes": 24 * GIB, "vram_used_bytes": int(vram_gib * GIB),
            "utilization_percent": load}  # fmt: skip


def telemetry(step: int, *, with_gpu: bool) -> NodeTelemetry:
    """A plausible reading at ``step``: a model answering in bursts on the GPU."""
    cpu = 18 + 10 * math.sin(step / 7)
    figures: dict[str, Any] = {
        "valid": True, "cpu_percent": cpu, "memory_used_bytes": int((11 + step / 60) * GIB),
        "memory_total_bytes": 64 * GIB if with_gpu else 16 * GIB,
    }  # fmt: skip
    if with_gpu:
        load = max(0.0, 55 + 40 * math.sin(step / 5)) if step % 40 > 8 else 3.0
        vram = 8.0 + 6 * (step > 60) + 0.4 * math.sin(step / 9)
        used = int(vram * GIB)
        figures.update(gpu_percent=load, vram_used_bytes=used, vram_total_bytes=24 * GIB,
                       gpus=[gpu(load, vram)])  # fmt: skip
    return msgspec.convert(figures, NodeTelemetry)


def node(node_id: str, name: str, address: str, *, me: bool) -> DiscoveredNode:
    """A PAIR node as discovery lists it."""
    raw = {
        "node_id": node_id, "name": name, "kind": "pair", "sources": ["self" if me else "mdns"],
        "addresses": [address], "ports": {"node": 14320, **DOORS}, "reachable": True,
        "version": "0.1.0", "last_seen": NOW, "system": "Linux", "cpu_threads": 32 if me else 8,
        "engines": {"ollama": {"models": ["llama3.2:3b", "qwen3:8b"], "loaded": ["qwen3:8b"]}},
    }  # fmt: skip
    return msgspec.convert(raw, DiscoveredNode)


def nodes_model() -> NodesModel:
    """This computer with an RTX 4090 and five minutes of history, and a laptop without a GPU."""
    model = NodesModel()
    model.load([node(SELF, "desk", "192.168.1.10", me=True),
                node(LAPTOP, "laptop", "192.168.1.23", me=False)])  # fmt: skip
    for step in range(SAMPLES):
        at = NOW - 2.0 * (SAMPLES - step)
        model.apply_telemetry(NodeId(SELF), telemetry(step, with_gpu=True), at)
        model.apply_telemetry(NodeId(LAPTOP), telemetry(step + 30, with_gpu=False), at)
    info = {
        "node_id": SELF, "name": "desk", "version": "0.1.0",
        "os": {"system": "Linux", "release": "6.8.0-49-generic", "machine": "x86_64"},
        "cpu": {"name": "AMD Ryzen 9 7950X", "cores": 32}, "memory": {}, "gpus": [gpu(40, 14)],
        "telemetry_valid": True, "ports": {"node": 14320, **DOORS},
    }  # fmt: skip
    model.set_self_info(msgspec.convert(info, NodeInfo))
    statuses = answers()["engine:subscribe"]["engines"]
    model.set_self_engines([msgspec.convert(status, EngineStatus) for status in statuses])
    return model


async def render(out_dir: Path) -> None:
    """Build both pages on one scripted connection, let them fill, save them."""
    rig = engines_rig()
    connection, nodes = rig.connection, nodes_model()
    overview = OverviewPage(connection, nodes)
    engines_page = EnginesPage(connection, rig.model, rig.controller, nodes=nodes)
    for page, size in ((overview, OVERVIEW_SIZE), (engines_page, ENGINES_SIZE)):
        page.resize(*size)
        page.show()
    try:
        connection.become_ready()
        me = NodeId(SELF)
        await wait_until(lambda: engines_page.card(me, EngineName("llamacpp")) is not None)
        busy = {"seq": 2, "event": "scheduler_changed", "scheduler": BUSY}
        connection.push(methods.ENGINE_EVENT.name, busy)
        ollama = engines_page.card(me, EngineName("ollama"))
        assert ollama is not None
        ollama.port_edit.setText("80")  # refused by the form: the error reads beside the field
        ollama.port_edit.setModified(True)  # as typed by a person
        ollama.apply_port_button.click()
        await asyncio.sleep(0.4)  # layouts settle
        for name, page in (("overview", overview), ("engines", engines_page)):
            save_png(page, out_dir / f"{name}.png")
    finally:
        await rig.close()


def main() -> int:
    """Parse arguments and render."""
    return render_to_out_dir(__doc__, Path("/tmp/gpu-card"), render)


if __name__ == "__main__":
    sys.exit(main())
