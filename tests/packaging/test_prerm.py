"""The package's prerm stops the PAIR processes that run from the package's files before a removal
deletes them (saying whose, and that the data stays), and leaves them running on an upgrade.
dpkg's DPKG_ROOT points it at a stand-in install under a temporary root."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.linux_only("dpkg's prerm finds processes through /proc")
PRERM = Path(__file__).resolve().parents[2] / "packaging" / "deb" / "prerm"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A root whose ``/usr/lib/pair/pair`` is a program that runs until it is stopped."""
    root = tmp_path.resolve() / "root"
    app = root / "usr" / "lib" / "pair" / "pair"
    app.parent.mkdir(parents=True)
    sleep = shutil.which("sleep")
    assert sleep is not None
    shutil.copy(sleep, app)
    return root


@pytest.fixture
def running(root: Path) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen([root / "usr" / "lib" / "pair" / "pair", "300"])
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


def prerm(root: Path, action: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", PRERM, action],
        env={"DPKG_ROOT": str(root), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )


def test_a_removal_stops_what_runs_from_the_package(
    root: Path, running: subprocess.Popen[bytes]
) -> None:
    done = prerm(root, "remove")
    assert running.wait(timeout=5) is not None
    assert f"(pid {running.pid})" in done.stdout and "the data stays" in done.stdout
    assert done.stderr == ""


def test_an_upgrade_stops_nothing(root: Path, running: subprocess.Popen[bytes]) -> None:
    done = prerm(root, "upgrade")
    assert running.poll() is None
    assert done.stdout == ""


def test_with_nothing_running_a_removal_says_nothing(root: Path) -> None:
    assert prerm(root, "remove").stdout == ""
