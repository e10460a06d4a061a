"""Render the Overview after a card already laid out gains an engine row, to a PNG.

    .venv/bin/python scripts/render_overview_grown_card.py [--out /tmp/overview-grown.png]

Offscreen (QT_QPA_PLATFORM=offscreen) unless another platform is set; no broker runs. Three
computers in two columns (the page of a 1100 px window); once shown, gpu-box starts a second
engine, so its card must grow to hold both engine rows and their "Loaded" lines.
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
for path in (ROOT, ROOT / "scripts"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import msgspec  # noqa: E402
from _offscreen import ScriptedConnection, run_on_qt, wait_until  # noqa: E402

from app.models.nodes import NodesModel  # noqa: E402
from app.window.overview_page import OverviewPage  # noqa: E402
from backend.protocol.types.nodes import DiscoveredNode  # noqa: E402

GIB = 1024**3
ONE = {"ollama": {"loaded": ["llama3.2:3b", "mistral:7b"]}}
TWO = {"llamacpp": {"loaded": ["tiny-random-llama"]}, "ollama": {"loaded": ["qwen2.5:7b"]}}


def node(node_id: str, name: str, engines: dict[str, Any]) -> DiscoveredNode:
    """A reachable PAIR computer with ``engines``."""
    raw = {"node_id": node_id, "name": name, "kind": "pair", "sources": ["mdns"],
           "addresses": ["192.168.1.9"], "ports": {"node": 14320}, "engines": engines,
           "reachable": True, "last_seen": 100.0, "version": "0.4.0",
           "telemetry": {"valid": True, "cpu_percent": 7.0, "memory_used_bytes": 1 * GIB,
                         "memory_total_bytes": 24 * GIB}}  # fmt: skip
    return msgspec.convert(raw, DiscoveredNode)


async def render(out: Path) -> None:
    """Show the page, add the engine, let the layouts settle, save it."""
    connection = ScriptedConnection({})
    model = NodesModel()
    page = OverviewPage(connection, model)
    connection.become_ready()
    model.load([node("a", "gaming-pc", ONE), node("g", "gpu-box", ONE), node("l", "laptop", TWO)])
    page.resize(930, 720)
    page.show()
    await wait_until(lambda: page.grid.columns == 2)
    model.upsert(node("g", "gpu-box", TWO))
    await asyncio.sleep(0.4)  # layouts settle
    if not page.grab().save(str(out)):
        raise OSError(f"could not write {out}")
    print(f"saved {out}")


def main() -> int:
    """Parse arguments and render."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("/tmp/overview-grown.png"))
    out = parser.parse_args().out
    run_on_qt(lambda: render(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
