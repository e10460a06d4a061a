"""macOS's exit watch for real: the watchdog launcher (``backend/core/lifetime/guard.py``) uses
kqueue's ``EVFILT_PROC`` / ``NOTE_EXIT`` there, on processes that are not its children (the
broker). Here the real kqueue watches two processes and reports the one that exits first, and
refuses a PID that is gone. The launcher end to end (a stand-in broker SIGKILLed, its child gone
with it; the launcher exiting as its child did; SIGTERM to the group) already runs on macOS in
``tests/integration/test_child_lifetime.py``, on this same watch; its decisions are tested
against a fake kqueue in ``tests/unit/core/lifetime/test_guard.py``."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from backend.core.lifetime.guard import KqueueExits, exit_watch, wait_first
from tests.platform.support import only_on

pytestmark = [only_on("darwin", "kqueue's NOTE_EXIT"), pytest.mark.timeout(60)]

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


@pytest.fixture
def sleepers() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Two sleeping processes of ours, killed and reaped afterwards."""
    started = [subprocess.Popen(SLEEPER) for _ in range(2)]
    yield started
    for process in started:
        process.kill()
        process.wait()


def test_the_launcher_watches_exits_with_kqueue_here() -> None:
    watch = exit_watch()
    try:
        assert isinstance(watch, KqueueExits)
    finally:
        watch.close()


@pytest.mark.parametrize(("first", "name"), [(0, "broker"), (1, "child")])
def test_kqueue_reports_which_of_the_broker_and_the_child_exits_first(
    sleepers: list[subprocess.Popen[bytes]], first: int, name: str
) -> None:
    broker, child = sleepers

    def gone_already() -> None:
        # Both are watched now: end the one that goes first (its exit comes as an event).
        sleepers[first].kill()

    assert wait_first(KqueueExits(), broker.pid, child.pid, gone_already) == name


def test_a_pid_that_is_gone_is_refused_at_once() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # reaped: the PID names no process now
    watch = KqueueExits()
    try:
        with pytest.raises(ProcessLookupError):
            watch.watch(gone.pid)
    finally:
        watch.close()
