"""The frozen app (PyInstaller, one folder), built once per run into ``build/frozen`` by
``packaging/build_frozen.py``, for every packaging test that needs the real thing.

Skipped when PyInstaller is not installed, unless ``PAIR_REQUIRE_PACKAGING=1`` (CI), which makes
that a failure.

Bounds: the tests that use the build time only their own bodies (pytest-timeout's
``func_only``); the fixture is bounded by itself instead, by the lock's timeout and the build's.
A test's timeout that also counted the setup would have to cover a wait for another worker's
build plus a build of its own, and under load (four workers on two cores) a fixed sum of the
parts it happens to see does not: it fires during the setup, in whichever test asked first.

Every test that uses the build is in the xdist group ``FROZEN_GROUP``, so one worker builds it
and runs them all: on another worker such a test would only wait on the lock, a worker idle for
the length of the build (about 90 s on this project's 2-core machine). The package made from it
(``real_deb``) is built once per run the same way, in ``build/deb``: pytest-xdist 3.8 under
pytest 9.2 ignores the groups (pytest-xdist issue 1386), and a module fixture on two workers
built the package twice.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import filelock
import pytest

ROOT = Path(__file__).resolve().parents[2]
DIST = ROOT / "build" / "frozen"
DEB_DIR = ROOT / "build" / "deb"
BUILD_TIMEOUT_S = 1200
# A worker waits on the lock for at most one build by another worker (and its clean-up).
LOCK_TIMEOUT_S = BUILD_TIMEOUT_S + 60
FROZEN_GROUP = "frozen-build"


@pytest.fixture(scope="session")
def frozen_pair() -> Path:
    """The ``pair`` executable of a frozen build made by ``packaging/build_frozen.py``."""
    if importlib.util.find_spec("PyInstaller") is None:
        reason = "PyInstaller is not installed (the `dev` extra has it)"
        if os.environ.get("PAIR_REQUIRE_PACKAGING") == "1":
            pytest.fail(f"{reason}, and PAIR_REQUIRE_PACKAGING=1")
        pytest.skip(reason)
    name = "pair.exe" if sys.platform == "win32" else "pair"
    executable = DIST / "pair" / name
    # Under pytest-xdist every worker that needs the build asks for it: the first builds it,
    # the others wait on the lock and take that build (the run's id marks it as this run's).
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    stamp = DIST / "built-for-run"
    DIST.mkdir(parents=True, exist_ok=True)
    with run_lock(DIST.parent / "frozen.lock"):
        if run and executable.exists() and stamp.exists() and stamp.read_text() == run:
            return executable
        stamp.unlink(missing_ok=True)
        done = subprocess.run(
            [sys.executable, str(ROOT / "packaging" / "build_frozen.py"), "--dist", str(DIST)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
        )
        assert done.returncode == 0, f"the build failed:\n{done.stdout}\n{done.stderr}"
        print(done.stdout)
        if run:
            stamp.write_text(run)
    return executable


@contextlib.contextmanager
def run_lock(path: Path) -> Iterator[None]:
    """A lock shared by this run's workers, held for at most one build by another worker."""
    lock = filelock.FileLock(path, timeout=LOCK_TIMEOUT_S)
    try:
        lock.acquire()
    except filelock.Timeout:
        pytest.fail(f"another worker held {path.name} for over {LOCK_TIMEOUT_S} s")
    try:
        yield
    finally:
        lock.release()
