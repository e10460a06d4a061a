"""A pytest-xdist worker that dies of a fatal signal names its cause in the run's summary: its
faulthandler dump (every thread's stack) is appended to the "crashed while running" failure
(tests/conftest.py). Checked on a throwaway run of one test that kills its own worker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import crashed_worker_dump

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


def _run_crashing_test(tmp_path: Path, signum: int) -> str:
    """Run one test that sends ``signum`` to its own worker; pytest's output."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_crash.py").write_text(
        f"import os\n\n\ndef test_dies_in_native_code():\n    os.kill(os.getpid(), {int(signum)})\n"
    )
    # A clean slate: not this worker's xdist variables nor its crash folder.
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("PYTEST_") and key != "PAIR_TEST_CRASH_DIR"
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-p",
            "tests.conftest",
            "-c",
            str(tmp_path / "pytest.ini"),
            "--rootdir",
            str(tmp_path),
            "-n",
            "1",
            "--max-worker-restart",
            "0",
            str(tmp_path / "test_crash.py"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    return done.stdout


def test_a_segfault_in_a_worker_is_reported_with_the_stacks(tmp_path: Path) -> None:
    output = _run_crashing_test(tmp_path, signal.SIGSEGV)
    assert "worker 'gw0' crashed while running 'test_crash.py::test_dies_in_native_code'" in output
    dump = output.split("gw0's faulthandler dump:\n", 1)[1]
    assert dump.startswith("Fatal Python error: Segmentation fault"), output
    assert "in test_dies_in_native_code" in dump, "the crashing test's frame is in the stack"
    assert "Extension modules:" in dump


def test_a_worker_killed_outright_says_it_left_no_dump(tmp_path: Path) -> None:
    output = _run_crashing_test(tmp_path, signal.SIGKILL)
    assert "worker 'gw0' crashed while running" in output
    assert "(no faulthandler dump: the worker was killed by SIGKILL" in output


def test_the_dump_is_the_last_process_s() -> None:
    log = (
        "== pytest-xdist worker gw0 (pid 10)\nFatal Python error: Aborted\n\nold stacks\n"
        "== pytest-xdist worker gw0 (pid 11)\nFatal Python error: Bus error\n\nnew stacks\n"
    )
    assert crashed_worker_dump(log) == "Fatal Python error: Bus error\n\nnew stacks"
    assert crashed_worker_dump("== pytest-xdist worker gw1 (pid 12)\n") == ""
    assert crashed_worker_dump("") == ""
