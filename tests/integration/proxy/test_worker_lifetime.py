"""A worker's life tied to the broker's: ``WorkerProcess`` spawns through its lifetime, has the
child adopted right after the start and let go of once reaped (Windows' job object is closed
then), and counts it ready only after its ``on_started``. And the proxy worker spawned as on
macOS (own session, no parent-death signal, no watchdog launcher) exits when its broker is
killed: its stdin reaches EOF."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import psutil
import pytest

from backend.core.clock import SystemClock
from backend.core.lifetime import (
    ChildLifetime,
    ChildTree,
    Ending,
    SpawnOptions,
    StartedChild,
    child_lifetime,
)
from backend.core.worker import WorkerExited, WorkerProcess
from backend.devtools import testworker
from tests.support.child import REPO_ROOT


@dataclass
class RecordingLifetime:
    """This OS's lifetime, recording what the worker asks of it, in order."""

    steps: list[str] = field(default_factory=list)
    inner: ChildLifetime = field(default_factory=child_lifetime)

    def command(self, argv: Sequence[str], *, ignore_sigpipe: bool = False) -> list[str]:
        self.steps.append("command")
        return self.inner.command(argv, ignore_sigpipe=ignore_sigpipe)

    def spawn_options(self, *, ignore_sigpipe: bool = False) -> SpawnOptions:
        self.steps.append("spawn_options")
        return self.inner.spawn_options(ignore_sigpipe=ignore_sigpipe)

    def adopt(self, child: StartedChild) -> ChildTree:
        self.steps.append(f"adopt {child.pid}")
        return RecordingTree(self.steps, self.inner.adopt(child))

    def kill_orphan(self, pid: int) -> None:
        self.steps.append(f"kill_orphan {pid}")


@dataclass
class RecordingTree:
    steps: list[str]
    inner: ChildTree

    def end(self, ending: Ending) -> None:
        self.steps.append(f"end {ending.value}")
        self.inner.end(ending)

    def release(self) -> None:
        self.steps.append("release")
        self.inner.release()  # Windows: closes the job object


async def test_a_worker_is_adopted_at_its_start_and_let_go_of_once_reaped() -> None:
    lifetime = RecordingLifetime()

    async def started(worker: WorkerProcess) -> None:
        lifetime.steps.append(f"started {worker.pid()}")

    worker = WorkerProcess(
        "testworker",
        testworker.argv("healthy"),
        clock=SystemClock(),
        on_started=started,
        lifetime=lifetime,
    )
    worker.bind_ready(lambda: lifetime.steps.append("ready"))
    run = asyncio.ensure_future(worker.run())
    try:
        async with asyncio.timeout(30):
            while "ready" not in lifetime.steps:
                await asyncio.sleep(0.01)
        pid = worker.pid()
        assert pid is not None
        if sys.platform != "win32":
            assert os.getpgid(pid) == pid, "its own process group"
            assert os.getsid(pid) == os.getsid(0), "in its broker's session (autogroup)"
    finally:
        await worker.stop()
        with pytest.raises(WorkerExited):
            await run
    assert lifetime.steps == ["spawn_options", f"adopt {pid}", f"started {pid}", "ready", "release"]


# A stand-in broker: spawns the proxy worker with macOS' keywords (no launcher in front of it),
# prints its PID, then waits to be killed.
BROKER = """
import subprocess, sys, time
from backend.common.self_command import self_argv
from backend.core.lifetime import for_platform
from backend.core.worker import spawn_keywords
options = spawn_keywords(for_platform("darwin"), ())
worker = subprocess.Popen(
    self_argv("worker", "proxy"), stdin=subprocess.PIPE, stdout=subprocess.PIPE, **options
)
print(worker.pid, flush=True)
time.sleep(120)
"""


def wait_gone(pid: int, seconds: float = 30.0) -> bool:
    """Whether ``pid`` exits (or is left a zombie) within ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.skipif(sys.platform == "win32", reason="Windows ties the worker with a job object")
def test_the_proxy_worker_spawned_as_on_macos_exits_when_its_broker_is_killed() -> None:
    broker = subprocess.Popen(
        [sys.executable, "-c", BROKER], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True
    )
    assert broker.stdout is not None
    worker = int(broker.stdout.readline())
    gone = False
    try:
        assert os.getpgid(worker) == worker, "its own session"
        assert not wait_gone(worker, 1.0), "it serves while its broker runs"
        broker.kill()
        broker.wait()
        gone = wait_gone(worker)
        assert gone, "the worker outlived its broker"
    finally:
        broker.stdout.close()
        if broker.poll() is None:
            broker.kill()
            broker.wait()
        if not gone:  # the test failed: end the worker it started (still running: no reuse)
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker, signal.SIGKILL)
