"""Atomic writes: the whole new file or the old one, with the mode from the first byte."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from unittest import mock

import pytest

from backend.common.files import set_aside, write_atomic, write_private_atomic


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_private_file_is_0600_in_a_0700_directory(tmp_path: Path) -> None:
    path = tmp_path / "new" / "secret.json"
    write_private_atomic(path, b"one")
    write_private_atomic(path, b"two")
    assert path.read_bytes() == b"two"
    assert _mode(path) == 0o600 and _mode(path.parent) == 0o700
    assert [p.name for p in path.parent.iterdir()] == ["secret.json"]


def test_a_shared_file_gets_the_mode_asked_for(tmp_path: Path) -> None:
    path = tmp_path / "autostart" / "pair.desktop"
    write_atomic(path, b"[Desktop Entry]\n")
    assert _mode(path) == 0o644
    write_atomic(path, b"x", mode=0o640)
    assert _mode(path) == 0o640


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    write_private_atomic(path, b"old")
    with (
        mock.patch("os.fsync", side_effect=OSError("disk full")),
        pytest.raises(OSError, match="disk"),
    ):
        write_private_atomic(path, b"new")
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["settings.json"]


def test_set_aside_never_overwrites_an_earlier_copy(tmp_path: Path) -> None:
    path = tmp_path / "pair.db"
    path.write_text("first")
    assert set_aside(path, "corrupt", 7).name == "pair.db.corrupt-7"
    path.write_text("second")
    assert set_aside(path, "corrupt", 7).name == "pair.db.corrupt-7-1"
