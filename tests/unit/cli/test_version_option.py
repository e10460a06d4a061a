"""``pair --version`` prints the version with the build's commit, asking for it only then."""

from __future__ import annotations

import pytest

from backend.cli import main as cli
from backend.common import buildinfo


def test_version_prints_the_version_and_commit(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    asked: list[str] = []
    monkeypatch.setattr(buildinfo, "commit", lambda: asked.append("commit") or "1a2b3c4")
    parser = cli.build_parser()
    assert asked == [], "building the parser does not look the commit up"
    with pytest.raises(SystemExit) as exited:
        parser.parse_args(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"pair {buildinfo.VERSION} (commit 1a2b3c4)\n"


def test_version_without_a_commit(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(buildinfo, "commit", lambda: None)
    with pytest.raises(SystemExit):
        cli.main(["--version"])
    assert capsys.readouterr().out == f"pair {buildinfo.VERSION}\n"
    assert "--version" in cli.build_parser().format_help()
