"""The commit read from a real git checkout (``buildinfo.git_commit`` runs git)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from backend.common import buildinfo

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def git(folder: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=PAIR", "-c", "user.email=pair@example.invalid", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        check=True,
        timeout=10,
    ).stdout.strip()


def test_git_commit_is_the_short_head_of_the_checkout(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    (tmp_path / "README").write_text("PAIR\n")
    git(tmp_path, "add", "README")
    git(tmp_path, "commit", "-q", "-m", "first")
    assert buildinfo.git_commit(tmp_path) == git(tmp_path, "rev-parse", "--short", "HEAD")


def test_a_checkout_without_commits_has_no_commit(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    assert buildinfo.git_commit(tmp_path) is None


def test_pair_version_names_this_checkout() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "from backend.cli.main import main; main(['--version'])"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == buildinfo.describe() + "\n"
    assert done.stdout.startswith(f"pair {buildinfo.VERSION}")
