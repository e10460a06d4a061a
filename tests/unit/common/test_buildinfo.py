"""The version's one source and the build's commit: the generated module, then git, then none."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tomllib
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

import backend
from backend.common import buildinfo

ROOT = Path(__file__).resolve().parents[3]
GENERATED = "backend.common._build"


@pytest.fixture(autouse=True)
def fresh_lookup() -> Iterator[None]:
    """Each test looks the commit up again, and the next test does not see its answer."""
    buildinfo.commit.cache_clear()
    yield
    buildinfo.commit.cache_clear()


@pytest.fixture
def no_generated_module(monkeypatch: pytest.MonkeyPatch) -> None:
    # None in sys.modules makes the import fail, whether or not a build left the file behind.
    monkeypatch.setitem(sys.modules, GENERATED, None)


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A source checkout (a folder with ``.git``) that ``commit()`` looks in."""
    (tmp_path / ".git").mkdir()
    monkeypatch.setattr(buildinfo, "CHECKOUT", tmp_path)
    return tmp_path


def answer_git(
    monkeypatch: pytest.MonkeyPatch, result: str | BaseException
) -> list[tuple[str, ...]]:
    """Make ``run_git`` answer ``result`` (or raise it); return the calls it gets."""
    calls: list[tuple[str, ...]] = []

    def run_git(checkout: Path, *args: str) -> str:
        calls.append((str(checkout), *args))
        if isinstance(result, BaseException):
            raise result
        return result

    monkeypatch.setattr(buildinfo, "run_git", run_git)
    return calls


def generated(monkeypatch: pytest.MonkeyPatch, commit: object) -> None:
    module = types.ModuleType(GENERATED)
    module.COMMIT = commit  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, GENERATED, module)


def test_pyproject_reads_the_version_from_buildinfo() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"], "the version is written in buildinfo only"
    assert "version" in project["project"]["dynamic"]
    source = project["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    module_name, _, name = source.rpartition(".")
    module = importlib.import_module(module_name)
    assert getattr(module, name) == buildinfo.VERSION == backend.__version__


def test_the_generated_module_is_ignored_by_git() -> None:
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    assert buildinfo.GENERATED_FILE.relative_to(ROOT).as_posix() in ignored


def test_the_generated_module_wins_over_git(
    monkeypatch: pytest.MonkeyPatch, checkout: Path
) -> None:
    generated(monkeypatch, "1a2b3c4")
    calls = answer_git(monkeypatch, "9f9f9f9\n")
    assert buildinfo.commit() == "1a2b3c4"
    assert buildinfo.describe() == f"pair {buildinfo.VERSION} (commit 1a2b3c4)"
    assert calls == []


def test_without_the_module_git_names_the_commit(
    monkeypatch: pytest.MonkeyPatch, no_generated_module: None, checkout: Path
) -> None:
    calls = answer_git(monkeypatch, "9f9f9f9\n")
    assert buildinfo.commit() == "9f9f9f9"
    assert buildinfo.commit() == "9f9f9f9"
    assert calls == [(str(checkout), "rev-parse", "--short", "HEAD")], "asked once, then cached"


def test_a_generated_module_without_a_commit_falls_back_to_git(
    monkeypatch: pytest.MonkeyPatch, checkout: Path
) -> None:
    generated(monkeypatch, "not a commit")
    answer_git(monkeypatch, "9f9f9f9\n")
    assert buildinfo.commit() == "9f9f9f9"


def test_no_checkout_no_commit_and_git_is_not_asked(
    monkeypatch: pytest.MonkeyPatch, no_generated_module: None, tmp_path: Path
) -> None:
    monkeypatch.setattr(buildinfo, "CHECKOUT", tmp_path)  # no .git here
    calls = answer_git(monkeypatch, "9f9f9f9\n")
    assert buildinfo.commit() is None
    assert buildinfo.describe() == f"pair {buildinfo.VERSION}"
    assert calls == []


def test_a_frozen_app_does_not_ask_git(
    monkeypatch: pytest.MonkeyPatch, no_generated_module: None, checkout: Path
) -> None:
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    calls = answer_git(monkeypatch, "9f9f9f9\n")
    assert buildinfo.commit() is None
    assert calls == []


@pytest.mark.parametrize(
    "failure",
    [
        FileNotFoundError("git"),
        subprocess.TimeoutExpired(["git"], buildinfo.GIT_TIMEOUT_S),
        subprocess.CalledProcessError(128, ["git"], stderr="fatal: not a git repository"),
        "",
        "fatal: something\n",
    ],
    ids=["no git", "too slow", "git fails", "no output", "not a commit"],
)
def test_git_failing_means_no_commit(
    monkeypatch: pytest.MonkeyPatch,
    no_generated_module: None,
    checkout: Path,
    failure: str | BaseException,
) -> None:
    answer_git(monkeypatch, failure)
    assert buildinfo.commit() is None


def test_write_build_info_writes_the_module_commit_reads(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = buildinfo.write_build_info("0123abc", tmp_path / "_build.py")
    spec = importlib.util.spec_from_file_location(GENERATED, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, GENERATED, module)
    assert buildinfo.commit() == "0123abc"
    buildinfo.remove_build_info(path)
    buildinfo.remove_build_info(path)  # already gone: nothing to do
    assert not path.exists()


@pytest.mark.parametrize("commit", ["", "HEAD", '1a2b3c4"\nimport os', "1A2B3C4"])
def test_write_build_info_takes_only_a_commit_id(tmp_path: Path, commit: str) -> None:
    with pytest.raises(ValueError, match="not a commit id"):
        buildinfo.write_build_info(commit, tmp_path / "_build.py")
    assert not (tmp_path / "_build.py").exists()
