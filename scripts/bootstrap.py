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
    if sys.version_info < (3, 11):
        print("PAIR needs Python 3.11 or newer", file=sys.stderr)
        return 2
    if not argv or argv[0] not in ("run", "test"):
        print(__doc__, file=sys.stderr)
        return 2
    ensure_environment()
    if argv[0] == "run":
        return subprocess.call([str(PYTHON), "-m", "backend", *argv[1:]], cwd=ROOT)
    return run_tests(argv[1:])


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
    code = subprocess.call([str(PYTHON), "-m", "pytest", *extra], cwd=ROOT, env=env)
    if code == 5:
        print("bootstrap: pytest collected no tests; that is a failure", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
