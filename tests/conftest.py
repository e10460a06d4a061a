"""Guards for every test: no leaked threads, no leaked child processes. And, under
pytest-xdist, a worker that dies of a fatal signal names its cause: each worker's faulthandler
dump (every thread's stack) goes to a file of its own, which the controller appends to the
"crashed while running" failure, so the stacks sit in the run's summary instead of scrolling
past in the middle of the output."""

from __future__ import annotations

import contextlib
import faulthandler
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import psutil
import pytest

from tests.support.ordering import order_for_workers
from tests.support.platforms import skip_linux_only

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# Test brokers keep their keys in files, never in the keyring of the machine running the tests.
os.environ["PAIR_KEYRING"] = "off"
# Test brokers on this machine's own network neither announce themselves nor browse over mDNS:
# each would find every other test's brokers running at the time and poll each of them over TLS
# every two seconds, a cost that grows with the square of the brokers alive. The tests of mDNS
# itself run their brokers in network namespaces, and take this variable out of their brokers'
# environment (tests/integration/discovery, tests/support/namespace_brokers.py).
os.environ["PAIR_DISCOVERY_MDNS"] = "0"

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
            if child.pid not in before and _running(child)
        ]
        if not leaked or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    described = [(child.pid, _command(child)) for child in leaked]
    for child in leaked:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()  # our own descendant, killed by PID so the next test starts clean
    assert not leaked, f"processes leaked: {described}"


def _running(process: psutil.Process) -> bool:
    """Whether ``process`` has not exited (one that exits as it is looked at has)."""
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _command(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.NoSuchProcess:
        return ["(exited)"]


# The folder of the workers' crash dumps: made by the controller before it starts the workers,
# which inherit its environment.
_CRASH_DIR_VARIABLE = "PAIR_TEST_CRASH_DIR"
_WORKER_HEADER = "== pytest-xdist worker "
_crash_log = pytest.StashKey[TextIO]()
_crash_dir = pytest.StashKey[Path]()


@pytest.hookimpl(trylast=True)  # after pytest's faulthandler plugin, which writes to stderr
def pytest_configure(config: pytest.Config) -> None:
    """Route a worker's faulthandler dump to its file; on the controller, make the folder."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        if config.pluginmanager.hasplugin("xdist"):
            folder = Path(tempfile.mkdtemp(prefix="pair-test-crashes-"))
            os.environ[_CRASH_DIR_VARIABLE] = str(folder)
            config.stash[_crash_dir] = folder
            config.pluginmanager.register(CrashDumps(folder), "pair-crash-dumps")
        return
    folder_name = os.environ.get(_CRASH_DIR_VARIABLE)
    if folder_name is None:
        return
    # Appended to: a worker that replaces a crashed one has the same id.
    log = (Path(folder_name) / f"{worker}.log").open("a", encoding="utf-8")
    log.write(f"{_WORKER_HEADER}{worker} (pid {os.getpid()})\n")
    log.flush()
    faulthandler.enable(file=log, all_threads=True)
    config.stash[_crash_log] = log


@pytest.hookimpl(trylast=True)  # after pytest's faulthandler plugin has let go of the file
def pytest_unconfigure(config: pytest.Config) -> None:
    """Close the worker's dump file; the controller removes the folder."""
    if _crash_log in config.stash:
        config.stash[_crash_log].close()
    if _crash_dir in config.stash:
        shutil.rmtree(config.stash[_crash_dir], ignore_errors=True)


def crashed_worker_dump(log: str) -> str:
    """The part of a worker's dump file written by its last process (the one that crashed)."""
    _before, header, dump = log.rpartition(_WORKER_HEADER)
    if not header:
        return ""
    _worker_line, _newline, dump = dump.partition("\n")
    return dump.strip()


class CrashDumps:
    """On the controller: appends a crashed worker's faulthandler dump to its failure report."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport) -> None:
        worker = report.node.gateway.id  # type: ignore[attr-defined]
        path = self.folder / f"{worker}.log"
        dump = crashed_worker_dump(path.read_text("utf-8", "replace")) if path.exists() else ""
        if not dump:
            # Nothing a fatal signal would have written: SIGKILL (the OOM killer, a test that
            # killed the wrong PID) or os._exit.
            dump = "(no faulthandler dump: the worker was killed by SIGKILL, or called _exit)"
        report.longrepr = f"{report.longrepr}\n\n{worker}'s faulthandler dump:\n{dump}"


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Skip the tests marked ``linux_only`` off Linux, saying why (tests/support/platforms.py),
    and order the rest for the workers (tests/support/ordering.py)."""
    skip_linux_only(items)
    order_for_workers(items)
