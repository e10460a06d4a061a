"""Render the Models page with replicas PAIR's planner loaded, and the Jobs list with the
planner's load and unload jobs, to PNGs against a scripted connection.

    .venv/bin/python scripts/render_replicas.py [--out-dir docs/screenshots]

Offscreen (QT_QPA_PLATFORM=offscreen) unless another platform is set; no broker runs. This
computer (laptop) holds a replica of qwen2.5:7b the planner loaded 3 minutes ago because it
waited on gpu-box, next to a model the user loaded; the member gpu-box holds a llama.cpp
replica too. The Jobs list shows the load, a failed load and an unload among chat requests.
Saved: ``models-replica.png`` and ``jobs-replica.png``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import msgspec
from _models_page import models_page
from _offscreen import render_to_out_dir, save_png
from PySide6.QtWidgets import QVBoxLayout, QWidget

from app.models.jobs import JobsFilterModel, JobsModel
from app.window.jobs_page import jobs_table
from backend.protocol import methods
from backend.protocol.types.jobs import JobRecord

PAGE_SIZE = (1500, 420)
SELF = "5d0c1a2e-0000-4000-8000-000000000001"
GPU = "5d0c1a2e-0000-4000-8000-000000000002"
NAMES = {SELF: "laptop", GPU: "gpu-box"}
HOT, USER, CODER = "qwen2.5:7b", "llama3.2:3b", "qwen2.5-coder-7b-instruct-q4_k_m"
REASON = f"{HOT} waited 18 s on gpu-box"
GB = 1_000_000_000


def engine(name: str, display: str, port: int) -> dict[str, Any]:
    """A running engine's ``EngineStatus``."""
    return {
        "engine": name, "display_name": display, "front_door": "openai", "mode": "process",
        "installed": True, "state": "running", "port": port, "default_port": port,
    }  # fmt: skip


def mark(ago_s: float, reason: str, by: str = SELF) -> dict[str, Any]:
    """A ``ReplicaMark`` made ``ago_s`` seconds ago, unloaded after 5 minutes idle."""
    return {"loaded_at": time.time() - ago_s, "reason": reason, "by": by, "ttl_s": 300.0}


def answers() -> dict[str, Any]:
    """What the scripted broker answers."""
    status = {
        "version": "0.1.0", "pid": 1, "started_at": 0.0, "uptime_ms": 1, "data_dir": "/d",
        "node_id": SELF, "node_name": "laptop", "control_address": "x", "log_file": None,
        "ports": {"node": 14320, "ollama": 11434, "openai": 1234, "llamacpp": 8080},
        "components": [], "errors": [],
    }  # fmt: skip
    local = {
        "models": [USER, HOT], "by_engine": {"ollama": [USER, HOT]},
        "loaded_by_engine": {"ollama": [USER, HOT]}, "slots_by_engine": {},
        "sizes_by_engine": {"ollama": {USER: int(2.0 * GB), HOT: int(4.7 * GB)}},
        "replicas_by_engine": {"ollama": {HOT: mark(185, REASON)}},
    }  # fmt: skip
    gpu_models = {
        "models": [CODER], "by_engine": {"llamacpp": [CODER]},
        "loaded_by_engine": {"llamacpp": [CODER]}, "slots_by_engine": {},
        "sizes_by_engine": {"llamacpp": {CODER: int(4.7 * GB)}},
        "replicas_by_engine": {"llamacpp": {CODER: mark(
            40, "qwen2.5-coder waited 12 s on laptop", by=GPU)}},
    }  # fmt: skip
    member = {
        "node_id": GPU, "name": "gpu-box", "reachable": True,
        "engines": [engine("llamacpp", "llama.cpp (llama-server)", 8081)], "models": gpu_models,
    }  # fmt: skip
    snapshot = {
        "seq": 1, "engines": [engine("ollama", "Ollama", 11435)], "members": [member],
        "models": local,
    }  # fmt: skip
    return {
        methods.STATUS.name: status,
        methods.ENGINE_SUBSCRIBE.name: snapshot,
        methods.DISCOVERY_SUBSCRIBE.name: {"seq": 1, "nodes": []},
    }


def job(n: int, now: float, **fields: Any) -> JobRecord:
    """Job ``n``, received ``n`` seconds into the last five minutes."""
    created = now - 300 + n
    base: dict[str, Any] = {
        "key": f"{SELF}/7c1e9a40/{n}", "engine": "ollama", "model": HOT, "origin": SELF,
        "run_id": "7c1e9a40", "state": "completed", "created_at": created, "seq": 4,
        "attempt": 1, "path": "/v1/chat/completions", "target": GPU, "serving": GPU,
        "started_at": created + 0.2, "completed_at": created + 6.4, "client": "loopback",
    }  # fmt: skip
    base.update(fields)
    return msgspec.convert(base, JobRecord)


def jobs(now: float) -> list[JobRecord]:
    """Chats on gpu-box, the planner's load on laptop, a failed load and an older unload."""
    replica = {"path": "replica:load", "client": None, "target": SELF, "serving": SELF}
    return [
        job(20, now, path="replica:unload", client=None, model="mistral:7b", target=SELF,
            serving=SELF, completed_at=now - 280 + 1.2, note="idle for 5 min on laptop"),
        job(100, now, started_at=now - 200 + 18.3, completed_at=now - 200 + 24.0),
        job(112, now, **replica, completed_at=now - 188 + 9.6,
            note=f"{REASON}; loading it on laptop"),
        job(118, now, **replica, engine="lmstudio", model="qwen2.5-7b-instruct", state="failed",
            completed_at=now - 182 + 2.1, error="not enough free memory (needs 5.1 GB)",
            note=f"{REASON}; loading it on laptop"),
        job(140, now, target=SELF, serving=SELF, completed_at=now - 160 + 3.1),
    ]  # fmt: skip


def render_jobs(path: Path) -> None:
    """The Jobs table with the planner's jobs among requests."""
    now = time.time()
    model = JobsModel(now=lambda: now, tick_ms=60_000)
    model.set_node_names(NAMES, SELF)
    model.reset(jobs(now))
    window = QWidget()
    layout = QVBoxLayout(window)
    layout.addWidget(jobs_table(JobsFilterModel(model)))
    window.resize(1300, 240)
    window.show()
    save_png(window, path)


async def render(out_dir: Path) -> None:
    """Build the Models page, save it, then the Jobs table."""
    async with models_page(answers(), PAGE_SIZE, rows=3) as shown:
        save_png(shown.page, out_dir / "models-replica.png")
        render_jobs(out_dir / "jobs-replica.png")


def main() -> int:
    """Parse arguments and render."""
    return render_to_out_dir(__doc__, Path("docs/screenshots"), render)


if __name__ == "__main__":
    sys.exit(main())
