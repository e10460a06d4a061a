"""The control socket's folder cannot be taken from this user by another one (or by a link)."""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from pathlib import Path

import pytest

from backend.protocol import endpoint

pytestmark = pytest.mark.skipif(sys.platform in ("win32", "darwin"), reason="the /tmp fallback")


@pytest.fixture
def no_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No XDG runtime dir, a private temp dir and cache dir; the shared name this user gets."""
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    shared_tmp = tmp_path / "tmp"
    shared_tmp.mkdir()
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(shared_tmp))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return shared_tmp / f"pair-{os.getuid()}"


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_shared_name_is_used_when_it_is_this_users_and_tightened(no_xdg: Path) -> None:
    assert endpoint.runtime_dir() == no_xdg and _mode(no_xdg) == 0o700
    no_xdg.chmod(0o755)
    assert endpoint.runtime_dir() == no_xdg and _mode(no_xdg) == 0o700


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")
def test_a_name_another_user_took_first_falls_back_to_the_users_cache(no_xdg: Path) -> None:
    no_xdg.mkdir(mode=0o700)
    os.chown(no_xdg, os.getuid() + 4242, -1)  # squatted: another user made it first
    found = endpoint.runtime_dir()
    assert found != no_xdg and found.name == "run" and _mode(found) == 0o700
    assert found == endpoint.runtime_dir(), "every process of the user makes the same choice"
    assert endpoint.control_address(Path("/data")).startswith(str(found))


def test_a_link_planted_at_the_name_is_not_followed(no_xdg: Path, tmp_path: Path) -> None:
    target = tmp_path / "home-of-the-user"
    target.mkdir(mode=0o755)
    no_xdg.symlink_to(target)
    found = endpoint.runtime_dir()
    assert found != no_xdg and found.name == "run"
    assert _mode(target) == 0o755, "the linked folder was left alone"
