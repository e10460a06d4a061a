"""The headless node's systemd user unit names only what a user manager has, and the frozen
build's help says where the app is written."""

from __future__ import annotations

import configparser
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "packaging" / "systemd" / "pair-node.service"


def test_the_user_unit_waits_for_no_system_target() -> None:
    # network-online.target lives in the system manager: a user unit that wants it waits for
    # nothing, and PAIR follows address changes by itself.
    unit = configparser.ConfigParser(interpolation=None, strict=False)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read_string(UNIT.read_text())
    assert "network-online.target" not in UNIT.read_text()
    assert unit["Install"]["WantedBy"] == "default.target"


def test_the_frozen_builds_help_names_its_default_folders(
    capsys: pytest.CaptureFixture[str],
) -> None:
    sys.path.insert(0, str(ROOT / "packaging"))
    try:
        import build_frozen
    finally:
        sys.path.remove(str(ROOT / "packaging"))
    with pytest.raises(SystemExit) as done:
        build_frozen.main(["--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: build/frozen/)" in text and "lands in its pair/" in text
    assert "(default: build/pyinstaller/)" in text
