"""The order the suite hands tests to xdist's workers (tests/support/ordering.py): long tests
first, each part in collection order, and tests sharing a module's fixture kept together."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from tests.support.ordering import HEAVY_MODULES, order_for_workers


@dataclass
class FixtureDef:
    scope: str


@dataclass
class FixtureInfo:
    name2fixturedefs: dict[str, list[FixtureDef]]


@dataclass
class FakeItem:
    """What the ordering reads of a ``pytest.Item``."""

    nodeid: str
    marks: list[pytest.Mark] = field(default_factory=list)
    scopes: tuple[str, ...] = ("function",)

    def __post_init__(self) -> None:
        self._fixtureinfo = FixtureInfo(
            {f"f{i}": [FixtureDef(s)] for i, s in enumerate(self.scopes)}
        )

    def get_closest_marker(self, name: str) -> pytest.Mark | None:
        return next((mark for mark in self.marks if mark.name == name), None)

    def add_marker(self, marker: Any) -> None:
        self.marks.append(marker.mark)


def ordered(*items: FakeItem) -> list[str]:
    listed = list(items)
    order_for_workers(cast(list[pytest.Item], listed))
    return [item.nodeid for item in listed]


def test_slow_tests_go_first_then_heavy_modules_and_each_part_keeps_its_order() -> None:
    heavy = sorted(HEAVY_MODULES)[0]
    slow = pytest.mark.slow.mark
    names = ordered(
        FakeItem("tests/a.py::one"),
        FakeItem("tests/b.py::slow", [slow]),
        FakeItem("tests/c.py::two"),
        FakeItem(f"{heavy}::pairing"),
        FakeItem("tests/d.py::slow_too", [slow]),
    )
    assert names == [
        "tests/b.py::slow",
        "tests/d.py::slow_too",
        f"{heavy}::pairing",
        "tests/a.py::one",
        "tests/c.py::two",
    ]


def test_a_module_scoped_fixture_groups_its_tests_by_module() -> None:
    shared = FakeItem("tests/x.py::uses_module", scopes=("function", "module"))
    by_class = FakeItem("tests/x.py::Klass::uses_class", scopes=("class",))
    session = FakeItem("tests/y.py::uses_session", scopes=("session",))
    alone = FakeItem("tests/z.py::plain")
    ordered(shared, by_class, session, alone)
    groups = [item.get_closest_marker("xdist_group") for item in (shared, by_class, session, alone)]
    assert [group.args if group else None for group in groups] == [
        ("tests/x.py",),
        ("tests/x.py",),
        None,
        None,
    ]


def test_a_group_the_test_names_itself_is_kept() -> None:
    own = FakeItem("tests/x.py::t", [pytest.mark.xdist_group("mine").mark], scopes=("module",))
    ordered(own)
    assert [mark.args for mark in own.marks if mark.name == "xdist_group"] == [("mine",)]
