"""Python code run in a child interpreter from the repository root: for what must not touch the
test process itself (its collector, its scheduling policy)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def run_python(
    script: str, *arguments: str, without: tuple[str, ...] = (), extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -c script arguments`` to completion (it must exit 0, within a minute), with this
    environment less the variables ``without`` and plus ``extra``; its output as text."""
    environment = {k: v for k, v in os.environ.items() if k not in without}
    environment.update(extra or {})
    return subprocess.run(
        [sys.executable, "-c", script, *arguments],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env=environment,
    )
