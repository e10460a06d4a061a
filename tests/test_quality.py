"""The tree stays lint-clean (ruff) and type-clean (mypy --strict), as the house style asks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *argv], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def test_ruff_reports_nothing() -> None:
    result = _run(
        "ruff", "check", "--output-format", "concise", "app", "backend", "tests", "scripts", "bench"
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_applied() -> None:
    result = _run("ruff", "format", "--check", "app", "backend", "tests", "scripts", "bench")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_is_clean() -> None:
    result = _run("mypy", "app", "backend")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr
