"""The macOS watchdog launcher run for real on Linux (its pidfd watch stands in for kqueue):
a child dies with the broker that started it, reports its own exit, gets SIGTERM through its
group, and inherits SIGPIPE ignored only when asked. And ``EngineProcess`` through a lifetime:
the launcher's, and what it asks of Linux's."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

import psutil
import pytest

from backend.components.engines.process import EngineLog, EngineProcess
from backend.core.lifetime import ChildTree, Ending, SpawnOptions, StartedChild
from backend.core.lifetime.macos import MacLifetime
from backend.core.lifetime.posix import LinuxLifetime
from tests.support.child import REPO_ROOT

pytestmark = pytest.mark.skipif(
    not hasattr(os, "pidfd_open") and not hasattr(__import__("select"), "kqueue"),
    reason="needs pidfds or kqueue",
)

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]

# A stand-in broker: starts the sleeper through the launcher in a new session, prints the
# launcher's PID, then waits to be killed.
BROKER = """
import subprocess, sys, time
from backend.core.lifetime import ChildTree, Ending, SpawnOptions, StartedChild
from backend.core.lifetime.macos import MacLifetime
from backend.core.lifetime.posix import LinuxLifetime
argv = MacLifetime().command(sys.argv[1:])
launcher = subprocess.Popen(argv, start_new_session=True)
print(launcher.pid, flush=True)
time.sleep(120)
"""


def wait_gone(pid: int, seconds: float = 20.0) -> bool:
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


def wait_for_child(pid: int, seconds: float = 20.0) -> psutil.Process:
    """The one child ``pid`` starts."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if children := psutil.Process(pid).children():
            return children[0]
        time.sleep(0.05)
    raise AssertionError(f"pid {pid} started no child")


def test_the_child_dies_with_the_broker_that_started_it() -> None:
    broker = subprocess.Popen(
        [sys.executable, "-c", BROKER, *SLEEPER], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert broker.stdout is not None
        launcher = int(broker.stdout.readline())
        child = wait_for_child(launcher)
        assert os.getpgid(child.pid) == launcher, "the child is in the launcher's group"
    finally:
        broker.kill()
        broker.wait()
        broker.stdout.close()  # type: ignore[union-attr]

    assert wait_gone(child.pid), "the child outlived its broker"
    assert wait_gone(launcher)


def test_the_launcher_exits_as_its_child_did() -> None:
    argv = MacLifetime().command([sys.executable, "-c", "raise SystemExit(7)"])

    assert subprocess.run(argv, start_new_session=True, timeout=60).returncode == 7


def test_sigterm_to_the_group_ends_the_child_and_the_launcher_reports_it() -> None:
    launcher = subprocess.Popen(MacLifetime().command(SLEEPER), start_new_session=True)
    try:
        wait_for_child(launcher.pid)
        os.killpg(launcher.pid, signal.SIGTERM)
        assert launcher.wait(timeout=60) == -signal.SIGTERM
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("ignore_sigpipe", [False, True])
def test_sigpipe_is_ignored_in_the_child_only_when_asked(ignore_sigpipe: bool) -> None:
    # Not a Python probe: Python ignores SIGPIPE itself once running. A shell reports the
    # mask it was started with.
    probe = ["/bin/sh", "-c", "grep SigIgn /proc/$$/status"]
    argv = MacLifetime().command(probe, ignore_sigpipe=ignore_sigpipe)
    output = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True).stdout

    mask = int(output.split()[-1], 16)
    assert bool(mask & (1 << (signal.SIGPIPE - 1))) is ignore_sigpipe


async def test_an_engine_process_through_the_launcher_stops_with_its_whole_tree() -> None:
    output = EngineLog()
    script = "import time; print('up', flush=True); time.sleep(120)"
    process = await EngineProcess.spawn(
        [sys.executable, "-c", script], dict(os.environ), output, lifetime=MacLifetime()
    )
    async with asyncio.timeout(60):
        while "up" not in output.tail():
            await asyncio.sleep(0.05)
    engine = wait_for_child(process.pid)

    assert await process.stop(grace=30) == -signal.SIGTERM
    assert wait_gone(engine.pid)


class RecordingLifetime:
    """Linux's lifetime, noting what ``EngineProcess`` asks of it."""

    def __init__(self) -> None:
        self.linux = LinuxLifetime()
        self.asked: list[tuple[str, object]] = []
        self.ended: list[Ending] = []

    def command(self, argv: Sequence[str], *, ignore_sigpipe: bool = False) -> list[str]:
        self.asked.append(("command", ignore_sigpipe))
        return self.linux.command(argv, ignore_sigpipe=ignore_sigpipe)

    def spawn_options(self, *, ignore_sigpipe: bool = False) -> SpawnOptions:
        self.asked.append(("spawn_options", ignore_sigpipe))
        return self.linux.spawn_options(ignore_sigpipe=ignore_sigpipe)

    def adopt(self, child: StartedChild) -> ChildTree:
        self.asked.append(("adopt", child.pid))
        tree = self.linux.adopt(child)
        recording = self

        class Tree:
            def end(self, ending: Ending) -> None:
                recording.ended.append(ending)
                tree.end(ending)

            def release(self) -> None:
                recording.asked.append(("release", None))

        return Tree()

    def kill_orphan(self, pid: int) -> None:
        raise AssertionError("not asked here")


@pytest.mark.parametrize(
    ("setup", "kill", "ended"),
    [
        ("pass", False, [Ending.TERMINATE, Ending.KILL]),
        ("pass", True, [Ending.KILL, Ending.KILL]),
        (
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)",
            False,
            [Ending.TERMINATE, Ending.KILL, Ending.KILL],
        ),
    ],
)
async def test_an_engine_process_spawns_ends_and_lets_go_through_its_lifetime(
    setup: str, kill: bool, ended: list[Ending]
) -> None:
    lifetime, output = RecordingLifetime(), EngineLog()
    code = f"import signal, time; {setup}; print('up', flush=True); time.sleep(120)"
    process = await EngineProcess.spawn(
        [sys.executable, "-c", code],
        dict(os.environ),
        output,
        ignore_sigpipe=True,
        lifetime=lifetime,
    )
    async with asyncio.timeout(60):
        while "up" not in output.tail():
            await asyncio.sleep(0.05)

    await process.stop(kill=kill, grace=0.5)

    assert lifetime.asked[:3] == [
        ("command", True),
        ("spawn_options", True),
        ("adopt", process.pid),
    ]
    assert set(lifetime.asked[3:]) == {("release", None)}, "let go of once exited"
    assert lifetime.ended == ended


async def test_an_engine_that_exits_by_itself_is_let_go_of_without_a_signal() -> None:
    lifetime = RecordingLifetime()
    process = await EngineProcess.spawn(
        [sys.executable, "-c", "raise SystemExit(3)"],
        dict(os.environ),
        EngineLog(),
        lifetime=lifetime,
    )

    assert await process.wait() == 3
    assert lifetime.asked[-1] == ("release", None) and lifetime.ended == []
