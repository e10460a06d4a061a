"""``pair demo --headless``: three real brokers whose engines are PAIR's Ollama and LM Studio
emulators (and a real llama-server when installed), a trickle of requests, and a clean stop."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import psutil
import pytest

from backend.devtools.demo import connect
from backend.protocol import contract, methods
from backend.protocol.contract import Method
from backend.protocol.types.jobs import JobsQuery
from backend.protocol.types.nodes import DiscoveredNode
from tests.integration.conftest import ROOT

P = TypeVar("P")
R = TypeVar("R")

NAMES = ("gaming-pc", "laptop", "gpu-box")
READY_LINE = "PAIR demo is running:"


class RunningDemo:
    """A ``pair demo --headless`` process this test started, its output in a file."""

    def __init__(self, root: Path, output: Path) -> None:
        self.root = root
        self.output = output
        with output.open("wb") as sink:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "backend", "demo", "--headless", "--root", str(root)],
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                env=dict(os.environ),
            )

    def text(self) -> str:
        return self.output.read_text(errors="replace")

    async def wait_ready(self, timeout: float = 60.0) -> None:
        async with asyncio.timeout(timeout):
            while READY_LINE not in self.text():
                assert self.process.poll() is None, f"the demo exited:\n{self.text()}"
                await asyncio.sleep(0.1)

    def interrupt(self, timeout: float = 45.0) -> int:
        """Ctrl+C, as a user would press it; the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
            raise AssertionError(f"the demo did not stop:\n{self.text()}") from None


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[RunningDemo]:
    running = RunningDemo(tmp_path / "demo", tmp_path / "demo.out")
    try:
        yield running
    finally:
        running.interrupt()


async def _until(
    data_dir: Path,
    method: Method[P, R],
    params: P | None,
    check: Callable[[R], bool],
    timeout: float = 25.0,
) -> R:
    async with connect(data_dir) as peer, asyncio.timeout(timeout):
        while True:
            answer = await contract.call(peer, method, params)
            if check(answer):
                return answer
            await asyncio.sleep(0.2)


def _sees_the_others(nodes: list[DiscoveredNode]) -> bool:
    reachable = {node.name for node in nodes if node.reachable}
    return {"laptop", "gpu-box"} <= reachable


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def test_demo_runs_three_nodes_fills_jobs_and_stops_every_process(
    demo: RunningDemo,
) -> None:
    await demo.wait_ready()
    statuses = []
    for name in NAMES:
        async with connect(demo.root / name) as peer:
            statuses.append(await contract.call(peer, methods.STATUS))
    assert [status.node_name for status in statuses] == list(NAMES)
    brokers = [status.pid for status in statuses]
    entry = demo.root / "gaming-pc"

    nodes = await _until(entry, methods.DISCOVERY_GET_NODES, None, _sees_the_others)
    assert sum("manual" in node.sources for node in nodes) == 2
    # The demo pairs its nodes with PINs, as a person would: one cluster of three.
    cluster = await _until(entry, methods.CLUSTER_STATUS, None, lambda s: len(s.members) == 2)
    assert sorted(member.name for member in cluster.members) == ["gpu-box", "laptop"]
    assert "laptop paired" in demo.text()
    snapshot = await _until(
        entry,
        methods.JOBS_GET_INITIAL,
        JobsQuery(limit=50),
        lambda s: any(job.state == "completed" for job in s.jobs),
    )
    assert all(job.origin == statuses[0].node_id for job in snapshot.jobs)
    output = demo.text()
    gpu_box = next(line for line in output.splitlines() if line.startswith("  gpu-box"))
    assert "llama-server (real" in gpu_box or "llama-server not installed; skipping" in output
    lms_state = json.loads((demo.root / "laptop" / "lms-home" / "server.json").read_text())
    lms_pid = lms_state["pid"]
    assert _alive(lms_pid), "the LM Studio emulator runs while the demo does"

    assert demo.interrupt() == 0, demo.text()
    assert not [pid for pid in [*brokers, lms_pid] if _alive(pid)], demo.text()
    assert "Stopping the demo" in demo.text()
