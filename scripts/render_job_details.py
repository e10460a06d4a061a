"""Render a job's details window and the Jobs list's filter chips and table to PNGs.

    .venv/bin/python scripts/render_job_details.py [--out-dir /tmp/job-details]

Offscreen (QT_QPA_PLATFORM=offscreen) unless another platform is set; no broker runs. The
details are a chat from a LAN key that failed over once and then failed mid-stream (its whole
error, its timeline with both attempts, time to first token, chunks and tokens/s); the list
shows it with a completed, a running and a refused job, the "In flight" and "Running" chips
checked. Writes ``job-details.png``, ``job-details-refused.png`` and ``jobs-list.png``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import msgspec  # noqa: E402
from PySide6.QtWidgets import QApplication, QVBoxLayout, QWidget  # noqa: E402

from app.models.jobs import JobFilter, JobsFilterModel, JobsModel  # noqa: E402
from app.window.job_details import JobDetailsDialog  # noqa: E402
from app.window.jobs_filters import JobsFilterBar  # noqa: E402
from app.window.jobs_page import jobs_table  # noqa: E402
from backend.protocol.types.jobs import JobDetails, JobRecord  # noqa: E402

NOW = 1_790_000_000.0
SELF = "11111111-aaaa-4aaa-8aaa-aaaaaaaaaaaa"
GPU = "22222222-bbbb-4bbb-8bbb-bbbbbbbbbbbb"
NAMES = {SELF: "workstation", GPU: "gpu-box"}
ERROR = "the engine sent nothing for 30 s"


def record(n: int, **fields: Any) -> JobRecord:
    """Job ``n``, received ``n`` seconds into the last minute."""
    created = NOW - 60 + n
    base: dict[str, Any] = {
        "key": f"{SELF}/3fa9c2e1/{n}", "engine": "ollama", "model": "llama3.1:8b",
        "origin": SELF, "run_id": "3fa9c2e1", "state": "completed", "created_at": created,
        "seq": 4, "attempt": 1, "path": "/api/chat", "target": GPU, "serving": GPU,
        "started_at": created + 0.1, "completed_at": created + 0.42,
        "client": "loopback", "client_address": "127.0.0.1",
    }  # fmt: skip
    base.update(fields)
    return msgspec.convert(base, JobRecord)


def failed_over() -> JobDetails:
    """The retried, failed chat and its timeline."""
    created = NOW - 60 + 40
    job = record(
        40, state="failed", attempt=2, path="/v1/chat/completions", error=ERROR,
        client="guest laptop", client_address="192.168.1.23", first_token_at=created + 1.43,
        chunks=212, started_at=created + 0.61, completed_at=created + 9.8,
    )  # fmt: skip
    steps = [
        {"seq": 1, "kind": "submitted", "at": created + 0.004, "attempt": 1, "node": SELF},
        {"seq": 2, "kind": "submitted", "at": created + 0.31, "attempt": 2, "node": GPU},
        {"seq": 3, "kind": "started", "at": created + 0.61, "attempt": 2, "node": GPU},
        {"seq": 4, "kind": "errored", "at": created + 9.8, "attempt": 2, "error": ERROR},
    ]
    return msgspec.convert({"job": msgspec.to_builtins(job), "timeline": steps}, JobDetails)


def refused() -> JobDetails:
    """A request for a model no computer has: the door's 404, as a failed job."""
    created = NOW - 60 + 50
    job = record(
        50, state="failed", engine="", model="nope:1b", target=None, serving=None,
        started_at=None, completed_at=created + 0.0004, attempt=0,
        error="model 'nope:1b' not found",
    )  # fmt: skip
    steps = [
        {"seq": 1, "kind": "submitted", "at": created + 0.0002, "attempt": 0},
        {"seq": 2, "kind": "errored", "at": created + 0.0004, "attempt": 0,
         "error": "model 'nope:1b' not found"},
    ]  # fmt: skip
    return msgspec.convert({"job": msgspec.to_builtins(job), "timeline": steps}, JobDetails)


def label(node: str | None) -> str:
    """A node's name."""
    return NAMES.get(node or "", (node or "")[:8])


def render_dialog(details: JobDetails, path: Path) -> None:
    """The details window of ``details``, saved to ``path``."""
    dialog = JobDetailsDialog(details.job, label, now=lambda: NOW)
    dialog.show_details(details)
    dialog.resize(640, 660)
    dialog.show()
    QApplication.processEvents()
    dialog.grab().save(str(path))


def render_list(path: Path) -> None:
    """The chips ("In flight" and "Running" checked) over the table of four jobs."""
    model = JobsModel(now=lambda: NOW, tick_ms=60_000)
    model.set_node_names(NAMES, SELF)
    running = record(55, state="running", completed_at=None, attempt=3, model="qwen3:14b")
    jobs = [record(12), failed_over().job, refused().job, running]
    model.reset(jobs)
    window = QWidget()
    layout = QVBoxLayout(window)
    bar = JobsFilterBar(model)
    for state in ("in_flight", "running"):
        bar.state_buttons[state].setChecked(True)
    bar.refresh_choices(JobFilter())
    layout.addWidget(bar)
    layout.addWidget(jobs_table(JobsFilterModel(model)))
    window.resize(1100, 260)
    window.show()
    QApplication.processEvents()
    window.grab().save(str(path))


def main() -> None:
    """Render the three PNGs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=Path("/tmp/job-details"))
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    app = QApplication.instance() or QApplication(sys.argv)
    assert app is not None
    render_dialog(failed_over(), args.out_dir / "job-details.png")
    render_dialog(refused(), args.out_dir / "job-details-refused.png")
    render_list(args.out_dir / "jobs-list.png")
    print(f"wrote {args.out_dir}")


if __name__ == "__main__":
    main()
