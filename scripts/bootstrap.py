#!/usr/bin/env python3
"""Set up PAIR in ./.venv (only when pyproject.toml changed) and run it or its tests.

    python3 scripts/bootstrap.py run  [pair arguments]
    python3 scripts/bootstrap.py test [pytest arguments]

Needs only Python 3.11+ and access to the package registries.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
STAMP = VENV / ".bootstrap-stamp"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / ("python.exe" if os.name == "nt" else "python")


def main(argv: list[str]) -> int:
    if sys.version_info < (3, 11):  # noqa: UP036 - this script must also run on old Pythons
        print("PAIR needs Python 3.11 or newer", file=sys.stderr)
        return 2
    if not argv or argv[0] not in ("run", "test"):
        print(__doc__, file=sys.stderr)
        return 2
    ensure_environment()
    if argv[0] == "run":
        command = [str(PYTHON), "-m", "backend", *argv[1:]]
        if os.name == "posix":
            os.chdir(ROOT)
            os.execv(command[0], command)  # Ctrl+C and signals reach PAIR directly
        return call(command)
    return run_tests(argv[1:])


def call(command: list[str], env: dict[str, str] | None = None) -> int:
    """Run a child to completion; Ctrl+C is the child's to handle, we just wait for it."""
    child = subprocess.Popen(command, cwd=ROOT, env=env)
    while True:
        try:
            return child.wait()
        except KeyboardInterrupt:
            continue


def ensure_environment() -> None:
    """Create the venv and install PAIR with its dev extras, unless already current."""
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if PYTHON.exists() and STAMP.exists() and STAMP.read_text().strip() == wanted:
        return
    if not PYTHON.exists():
        print("bootstrap: creating .venv", file=sys.stderr)
        venv.EnvBuilder(with_pip=True, clear=True).create(VENV)
    print("bootstrap: installing PAIR and its development tools", file=sys.stderr)
    pip = [str(PYTHON), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    subprocess.check_call([*pip, "-e", ".[dev]"], cwd=ROOT)
    STAMP.write_text(wanted)


def run_tests(extra: list[str]) -> int:
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    code = call([str(PYTHON), "-m", "pytest", *extra], env=env)
    if code == 5:
        print("bootstrap: pytest collected no tests; that is a failure", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
