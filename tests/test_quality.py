"""The tree stays lint-clean (ruff) and type-clean (mypy --strict), as the house style asks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHECKED = ("app", "backend", "tests", "scripts", "bench", "packaging")


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *argv], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def test_ruff_reports_nothing() -> None:
    result = _run("ruff", "check", "--output-format", "concise", *CHECKED)
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_applied() -> None:
    result = _run("ruff", "format", "--check", *CHECKED)
    assert result.returncode == 0, result.stdout + result.stderr


# The two mypy runs share one worker, in this order, so the second finds the first's cache of
# app and backend (which the packaging scripts import) in .mypy_cache: 1 s instead of 13 s.
MYPY_GROUP = "mypy-cache"


@pytest.mark.xdist_group(MYPY_GROUP)
def test_mypy_strict_is_clean() -> None:
    result = _run("mypy", "app", "backend")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr


@pytest.mark.xdist_group(MYPY_GROUP)
def test_mypy_strict_is_clean_on_the_packaging_scripts() -> None:
    # Scripts, not a package (a `packaging` package would shadow PyPI's): checked file by file.
    scripts = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "packaging").rglob("*.py"))
    result = _run("mypy", "--strict", *scripts)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr
