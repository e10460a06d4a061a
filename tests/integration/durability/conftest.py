"""Crash cycles: how many, and reopening a data dir with PAIR's own loaders."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from backend.components.discovery.manual import ManualNodeStore
from backend.components.jobs.state import Job
from backend.components.jobs.store import JobRecordStore
from backend.components.settings.service import SettingsService
from backend.core.clock import SystemClock
from backend.core.store import Store
from backend.protocol.types.nodes import ManualNode
from tests.integration.conftest import free_port
from tests.integration.durability import records
from tests.integration.engines.conftest import write_override, write_script

# PAIR_LONG_TESTS=1 runs the full crash-cycle counts (minutes); the default suite runs a few.
LONG = os.environ.get("PAIR_LONG_TESTS") == "1"


def cycles(default: int, long: int) -> int:
    """``long`` with PAIR_LONG_TESTS=1, else ``default``."""
    return long if LONG else default


@dataclass
class Reopened:
    """A data dir as the next broker would find it."""

    jobs: list[Job]
    nodes: list[ManualNode]
    settings: dict[str, object]
    quick_check: str
    database_set_aside: Path | None
    settings_corrupt: list[str]
    temp_files_found: int  # settings temp files a cut write left behind
    temp_files_left: int  # those still there once the settings were loaded


async def reopen(data_dir: Path) -> Reopened:
    """Open ``pair.db`` and ``settings.json`` as the broker does and read every record."""
    store = Store(data_dir / records.DATABASE_FILE)
    await store.open()
    try:
        jobs = await JobRecordStore(store, keep_finished=records.KEEP_FINISHED).load()
        nodes = await ManualNodeStore(store).load()
        quick_check = (await store.fetch_all("PRAGMA quick_check"))[0][0]
    finally:
        await store.close()
    settings, corrupt, temp_files_found, temp_files_left = _load_settings(data_dir)
    return Reopened(
        jobs=jobs,
        nodes=nodes,
        settings=settings,
        quick_check=str(quick_check),
        database_set_aside=store.set_aside_path,
        settings_corrupt=corrupt,
        temp_files_found=temp_files_found,
        temp_files_left=temp_files_left,
    )


def _load_settings(data_dir: Path) -> tuple[dict[str, object], list[str], int, int]:
    """The values, the corruption reports and the temp files found before and after loading."""
    temp_pattern = f".{records.SETTINGS_FILE}.*.tmp"
    found = len(list(data_dir.glob(temp_pattern)))
    corrupt: list[str] = []
    settings = SettingsService(
        data_dir / records.SETTINGS_FILE,
        clock=SystemClock(),
        on_change=lambda _: None,
        on_corrupt=corrupt.append,
    )
    settings.load()
    left = len(list(data_dir.glob(temp_pattern)))
    return dict(settings.snapshot().values), corrupt, found, left


# The Ollama emulator standing in for ``ollama serve``, answering at a steady pace.
PACED_OLLAMA_SHIM = """#!{python}
import os, sys
host, _, port = os.environ.get("OLLAMA_HOST", "127.0.0.1:11434").rpartition(":")
argv = [sys.executable, "-m", "backend", "emulate", "ollama", "--host", host, "--port", port,
        "--models", "tinyllama:latest", "--parallel", os.environ.get("OLLAMA_NUM_PARALLEL", "1"),
        "--load-delay", "0", "--token-delay", "0.01", "--reply-tokens", "12"]
if sys.argv[1:] != ["serve"]:
    sys.exit("this shim only knows `ollama serve`")
os.execv(sys.executable, argv)
"""
SLOTS = 8


@pytest.fixture
def paced_ollama_node(tmp_path: Path) -> Path:
    """A data dir whose ``ollama`` is the emulator (8 slots, 12 tokens at 10 ms) on a free
    port."""
    data_dir = tmp_path / "node"
    shim = write_script(tmp_path / "ollama", PACED_OLLAMA_SHIM)
    write_override(
        data_dir,
        "ollama",
        {
            "detect": [{"path": str(shim)}],
            "runtime": {
                "port": free_port(),
                "env": {"OLLAMA_HOST": "{host}:{port}", "OLLAMA_NUM_PARALLEL": str(SLOTS)},
                "ready": {"timeout_s": 30},
                "health": {"interval_s": 0.5},
            },
        },
    )
    return data_dir
