"""Guards for every test: no leaked threads, no leaked child processes."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator

import psutil
import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# Test brokers keep their keys in files, never in the keyring of the machine running the tests.
os.environ["PAIR_KEYRING"] = "off"

# Threads owned by libraries for the whole session (asyncio's default executor is per loop and
# is closed with it; Qt and pytest-timeout keep their own).
_ALLOWED_THREAD_PREFIXES = ("pytest_timeout", "asyncio_", "Dummy-", "QDBus", "waitpid-")


@pytest.fixture(autouse=True)
def no_leaked_threads() -> Iterator[None]:
    """Fail a test that leaves a thread of its own running."""
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + 2.0
    while True:
        leaked = [
            thread
            for thread in set(threading.enumerate()) - before
            if thread.is_alive() and not thread.name.startswith(_ALLOWED_THREAD_PREFIXES)
        ]
        if not leaked or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not leaked, f"threads leaked: {[thread.name for thread in leaked]}"


@pytest.fixture(autouse=True)
def no_leaked_processes() -> Iterator[None]:
    """Fail a test that leaves a child process of this test process running."""
    me = psutil.Process()
    before = {child.pid for child in me.children(recursive=True)}
    yield
    deadline = time.monotonic() + 5.0
    while True:
        leaked = [
            child
            for child in me.children(recursive=True)
            if child.pid not in before and child.status() != psutil.STATUS_ZOMBIE
        ]
        if not leaked or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    for child in leaked:
        child.kill()  # our own descendant, killed by PID so the next test starts clean
    assert not leaked, f"processes leaked: {[(c.pid, c.cmdline()) for c in leaked]}"
