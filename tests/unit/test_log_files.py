"""PAIR's log files are readable by their owner only, also the ones rotation makes."""

from __future__ import annotations

import logging
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from backend.core import logs


@pytest.fixture
def root_handlers() -> Iterator[None]:
    """Put the root logger back as it was (``configure`` replaces its handlers)."""
    root = logging.getLogger()
    kept, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
        handler.close()
    for handler in kept:
        root.addHandler(handler)
    root.setLevel(level)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permission bits")
def test_every_log_file_stays_0600_after_rotations(tmp_path: Path, root_handlers: None) -> None:
    previous = os.umask(0o022)  # the usual umask: a plain new file would be 0644
    try:
        path = logs.configure("broker", level="info", log_dir=tmp_path, json_logs=False)
        assert path is not None
        rotating = next(
            h for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)
        )
        assert isinstance(rotating, logging.handlers.RotatingFileHandler)
        rotating.maxBytes = 300
        for index in range(40):
            logging.getLogger("pair.test").info("line %d %s", index, "x" * 40)
        rotating.flush()
    finally:
        os.umask(previous)
    files = sorted(tmp_path.glob("broker.log*"))
    assert len(files) >= 3, "it rotated"
    assert {f.name: stat.S_IMODE(f.stat().st_mode) for f in files} == {f.name: 0o600 for f in files}
