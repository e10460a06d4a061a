"""The open-file limit is raised at start: to the hard limit, capped, never lowered."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from backend.common import fd_limit

resource = pytest.importorskip("resource")


@pytest.fixture
def restored() -> Iterator[tuple[int, int]]:
    before = resource.getrlimit(resource.RLIMIT_NOFILE)
    yield before
    resource.setrlimit(resource.RLIMIT_NOFILE, before)


def test_a_low_soft_limit_is_raised_towards_the_hard_one(restored: tuple[int, int]) -> None:
    hard = restored[1]
    if hard != resource.RLIM_INFINITY and hard <= 256:
        pytest.skip("the hard limit leaves nothing to raise")
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
    wanted = 4096 if hard == resource.RLIM_INFINITY else min(hard, 4096)
    assert fd_limit.raise_open_file_limit(wanted) == wanted
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == (wanted, hard)
    assert fd_limit.open_file_limit() == wanted


def test_a_higher_soft_limit_is_left_alone(restored: tuple[int, int]) -> None:
    soft, hard = restored
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 512), hard))
    assert fd_limit.raise_open_file_limit(64) == min(soft, 512)


def test_without_the_resource_module_nothing_is_done(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "resource", None)
    assert fd_limit.raise_open_file_limit() is None
    assert fd_limit.open_file_limit() is None
