"""Replicas in the GUI: a model row carrying a replica mark says PAIR loaded it, when, why and
when it goes (this computer's rows and a member's), and a replica planner's jobs read as
"Load replica" / "Unload replica" with their note on the Jobs page and in a job's details."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from PySide6.QtCore import Qt
from pytestqt.modeltest import ModelTester
from pytestqt.qtbot import QtBot

from app.models.job_details_text import detail_rows
from app.models.job_text import TITLES, JobColumn, cell_text, cell_tooltip
from app.models.jobs import JobFilter
from app.models.models import ModelsModel
from app.models.replica_text import ago_text, idle_text, replica_mark_text
from backend.protocol.types.base import NodeId
from backend.protocol.types.engines import ReplicaMark
from backend.protocol.types.jobs import JobRecord
from tests.gui.test_models_page import Ui, close, engine, listing, make_ui, start

NOW = 10_000.0
REASON = "qwen2.5:7b waited 18 s on gpu-box"
NOTE = "qwen2.5:7b waited 18 s on gpu-box; loading it on laptop"
MAC = "node-mac"


def mark(loaded_at: float, ttl_s: float | None = 300.0) -> dict[str, Any]:
    return {"loaded_at": loaded_at, "reason": REASON, "by": "node-gpu", "ttl_s": ttl_s}


def replica_listing(loaded_at: float, ttl_s: float | None = 300.0) -> Any:
    models = listing({"ollama": ["qwen2.5:7b", "llama3"]}, {"ollama": ["qwen2.5:7b", "llama3"]})
    return {**models, "replicas_by_engine": {"ollama": {"qwen2.5:7b": mark(loaded_at, ttl_s)}}}


def test_a_marks_text_says_who_when_why_and_when_it_goes() -> None:
    loaded = ReplicaMark(loaded_at=NOW - 185, reason=REASON, ttl_s=300.0)
    assert replica_mark_text(loaded, NOW) == (
        f"Replica · loaded by PAIR 3 min ago: {REASON} · unloads after 5 min idle"
    )
    bare = ReplicaMark(loaded_at=NOW - 5, reason="")
    assert (
        replica_mark_text(bare, NOW)
        == "Replica · loaded by PAIR just now · unloaded again once idle"
    )
    assert [idle_text(s) for s in (45, 300, 5400, 7200)] == ["45 s", "5 min", "1 h 30 min", "2 h"]
    assert ago_text(7300) == "2 h ago"


@pytest.fixture
async def ui(qtbot: QtBot) -> AsyncIterator[Ui]:
    made = await make_ui(qtbot)
    yield made
    await close(made)


def status_cell(ui: Ui, node: str, model: str) -> tuple[str, str | None]:
    models = ui.controller.models
    position = models.position(ui.key("ollama", model)._replace(node=NodeId(node)))
    assert position is not None
    index = models.index(position, ModelsModel.STATUS_COLUMN)
    return index.data(Qt.ItemDataRole.DisplayRole), index.data(Qt.ItemDataRole.ToolTipRole)


async def test_a_replica_row_says_so_and_the_users_model_does_not(
    qtmodeltester: ModelTester, ui: Ui
) -> None:
    await start(ui, local=replica_listing(time.time() - 185))
    text, tip = status_cell(ui, "node-self", "qwen2.5:7b")
    assert text == f"Replica · loaded by PAIR 3 min ago: {REASON} · unloads after 5 min idle"
    assert tip is not None and f"Why: {REASON}" in tip and "once idle" in tip
    assert status_cell(ui, "node-self", "llama3") == ("Loaded", None)
    qtmodeltester.check(ui.controller.models, force_py=True)


async def test_a_members_replica_row_says_so_too(ui: Ui) -> None:
    member = {
        "node_id": MAC, "name": "mac-mini", "reachable": True, "engines": [engine("ollama")],
        "models": replica_listing(time.time() - 30, ttl_s=None),
    }  # fmt: skip
    await start(ui, members=(member,))
    text, _ = status_cell(ui, MAC, "qwen2.5:7b")
    assert text == f"Replica · loaded by PAIR just now: {REASON} · unloaded again once idle"
    assert status_cell(ui, MAC, "llama3")[0] == "Loaded"


def job(path: str = "replica:load", **fields: Any) -> JobRecord:
    base: dict[str, Any] = {
        "key": "node-self/run1/9", "engine": "ollama", "model": "qwen2.5:7b",
        "origin": "node-self", "run_id": "run1", "state": "completed",
        "created_at": NOW - 30.0, "seq": 4, "target": "node-lap", "serving": "node-lap",
        "started_at": NOW - 30.0, "completed_at": NOW - 21.5, "path": path, "note": NOTE,
    }  # fmt: skip
    base.update(fields)
    return JobRecord(**base)


def label(node: str | None) -> str:
    return {"node-self": "desk", "node-lap": "laptop"}.get(node or "", "?")


def test_a_replica_job_reads_as_such_with_its_note() -> None:
    load, unload = job(), job("replica:unload", note="idle for 5 min")
    assert TITLES[JobColumn.ERROR] == "Error / note"
    assert cell_text(load, JobColumn.ERROR, label, NOW) == f"Load replica: {NOTE}"
    assert cell_text(unload, JobColumn.ERROR, label, NOW) == "Unload replica: idle for 5 min"
    assert cell_tooltip(load, JobColumn.MODEL, label, NOW) == "qwen2.5:7b\nLoad replica"
    timeline = cell_tooltip(load, JobColumn.TIME, label, NOW)
    assert timeline is not None and timeline.endswith("Load replica  ·  job node-self/run1/9")
    assert "replica:load" not in timeline
    failed = job(state="failed", error="out of memory")
    expected = f"Load replica failed: out of memory — {NOTE}"
    assert cell_text(failed, JobColumn.ERROR, label, NOW) == expected


def test_a_request_keeps_its_path_and_error() -> None:
    request = job("/v1/chat/completions", note=None, error="boom", state="failed")
    assert cell_text(request, JobColumn.ERROR, label, NOW) == "boom"
    assert cell_tooltip(request, JobColumn.MODEL, label, NOW) == "qwen2.5:7b\n/v1/chat/completions"


def test_a_replica_jobs_details_say_what_and_why_instead_of_the_client() -> None:
    rows = dict(detail_rows(job(), label, NOW))
    assert (rows["Action"], rows["Why"]) == ("Load replica", NOTE)
    assert "Client API" not in rows and "Client" not in rows
    assert "Client API" in dict(detail_rows(job("/api/chat"), label, NOW))


def test_the_filters_text_finds_a_replica_job_by_its_note() -> None:
    accepts = JobFilter(text="gpu-box").predicate()
    assert accepts(job()) and not accepts(job("/api/chat", note=None))
