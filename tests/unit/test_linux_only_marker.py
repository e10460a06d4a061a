"""The ``linux_only`` marker: skipped off Linux with the reason, run on Linux, registered, and
every marked module named in docs/PLATFORMS.md."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.platforms import MARKER, linux_only_skip_reason, skip_linux_only

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class FakeItem:
    """The two calls ``skip_linux_only`` makes on a collected test."""

    marker: pytest.Mark | None
    added: list[pytest.Mark] = field(default_factory=list)

    def get_closest_marker(self, name: str) -> pytest.Mark | None:
        return self.marker if name == MARKER else None

    def add_marker(self, marker: pytest.MarkDecorator) -> None:
        self.added.append(marker.mark)


NETNS = pytest.mark.linux_only("network namespaces").mark


@pytest.mark.parametrize("platform", ["darwin", "win32"])
def test_a_marked_test_is_skipped_off_linux_saying_why(platform: str) -> None:
    assert linux_only_skip_reason(NETNS, platform) == (
        f"Linux only (network namespaces); this is {platform}"
    )


def test_a_marked_test_runs_on_linux_and_an_unmarked_one_everywhere() -> None:
    assert linux_only_skip_reason(NETNS, "linux") is None
    assert linux_only_skip_reason(None, "win32") is None


def test_a_marker_without_a_reason_still_says_linux() -> None:
    bare = pytest.mark.linux_only.mark
    assert linux_only_skip_reason(bare, "darwin") == "Linux only (needs Linux); this is darwin"


def test_only_the_marked_items_get_a_skip() -> None:
    marked, unmarked = FakeItem(NETNS), FakeItem(None)
    skip_linux_only([marked, unmarked], "win32")  # type: ignore[list-item]
    assert [(m.name, m.kwargs["reason"]) for m in marked.added] == [
        ("skip", "Linux only (network namespaces); this is win32")
    ]
    assert unmarked.added == []
    on_linux = FakeItem(NETNS)
    skip_linux_only([on_linux], "linux")  # type: ignore[list-item]
    assert on_linux.added == []


def test_the_marker_is_registered() -> None:
    pytest_config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    markers = pytest_config["ini_options"]["markers"]
    assert any(line.startswith((f"{MARKER}(", f"{MARKER}:")) for line in markers)


def test_every_marked_module_is_listed_in_platforms_md() -> None:
    marked = {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "tests").rglob("test_*.py")
        if re.search(rf"pytest\.mark\.{MARKER}\b", path.read_text(encoding="utf-8"))
        and path.name != Path(__file__).name
    }
    assert marked, "no module is marked linux_only"
    listed = set(re.findall(r"`(tests/[\w/]+\.py)`", (ROOT / "docs/PLATFORMS.md").read_text()))
    assert marked <= listed, f"marked but not in docs/PLATFORMS.md: {sorted(marked - listed)}"
