"""The keyed list model: Qt's model contract, row-level updates, resets only on snapshots."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from PySide6.QtCore import QModelIndex, Qt
from pytestqt.modeltest import ModelTester
from pytestqt.qtbot import QtBot

from app.models.keyed_table import ROW_ROLE, Column, KeyedTableModel


@dataclass(frozen=True)
class Item:
    key: str
    label: str
    count: int = 0


COLUMNS: tuple[Column[Item], ...] = (
    Column("Label", lambda item: item.label, tooltip=lambda item: f"key {item.key}"),
    Column("Count", lambda item: str(item.count)),
)


@pytest.fixture
def model() -> KeyedTableModel[str, Item]:
    return KeyedTableModel(COLUMNS, lambda item: item.key)


def test_model_contract_holds_through_every_kind_of_change(
    qtmodeltester: ModelTester, model: KeyedTableModel[str, Item]
) -> None:
    qtmodeltester.check(model, force_py=True)
    model.reset([Item("a", "A"), Item("b", "B")])
    model.upsert(Item("c", "C"))
    model.upsert(Item("a", "A", 2))
    model.remove("b")
    model.sync([Item("c", "C", 1), Item("d", "D")])
    model.reset([])
    model.upsert(Item("e", "E"))
    qtmodeltester.check(model, force_py=True)


def test_upsert_of_a_known_key_changes_one_row_without_a_reset(
    qtbot: QtBot, model: KeyedTableModel[str, Item]
) -> None:
    model.reset([Item("a", "A"), Item("b", "B"), Item("c", "C")])
    with (
        qtbot.assertNotEmitted(model.modelReset),
        qtbot.assertNotEmitted(model.rowsInserted),
        qtbot.waitSignal(model.dataChanged) as changed,
    ):
        model.upsert(Item("b", "B", 7))
    top_left, bottom_right = changed.args[0], changed.args[1]
    assert (top_left.row(), top_left.column()) == (1, 0)
    assert (bottom_right.row(), bottom_right.column()) == (1, 1)
    assert model.data(model.index(1, 1)) == "7"


def test_upsert_of_an_equal_row_emits_nothing(
    qtbot: QtBot, model: KeyedTableModel[str, Item]
) -> None:
    model.reset([Item("a", "A")])
    with qtbot.assertNotEmitted(model.dataChanged):
        model.upsert(Item("a", "A"))


def test_new_keys_are_inserted_and_removed_keys_removed_by_row(
    qtbot: QtBot, model: KeyedTableModel[str, Item]
) -> None:
    model.reset([Item("a", "A"), Item("b", "B")])
    with qtbot.waitSignal(model.rowsInserted) as inserted:
        model.upsert(Item("c", "C"))
    assert inserted.args[1:] == [2, 2]
    with qtbot.waitSignal(model.rowsRemoved) as removed:
        assert model.remove("a")
    assert removed.args[1:] == [0, 0]
    assert not model.remove("a")
    assert [item.key for item in model.rows()] == ["b", "c"]
    assert model.position("c") == 1


def test_sync_turns_a_snapshot_into_row_changes(
    qtbot: QtBot, model: KeyedTableModel[str, Item]
) -> None:
    model.reset([Item("a", "A"), Item("b", "B"), Item("c", "C")])
    with (
        qtbot.assertNotEmitted(model.modelReset),
        qtbot.waitSignals([model.rowsRemoved, model.rowsInserted, model.dataChanged]),
    ):
        model.sync([Item("c", "C", 3), Item("a", "A"), Item("d", "D")])
    assert [(item.key, item.count) for item in model.rows()] == [("a", 0), ("c", 3), ("d", 0)]


def test_reset_replaces_everything_in_one_reset(
    qtbot: QtBot, model: KeyedTableModel[str, Item]
) -> None:
    model.reset([Item("a", "A")])
    with qtbot.waitSignal(model.modelReset), qtbot.assertNotEmitted(model.rowsInserted):
        model.reset([Item("x", "X"), Item("y", "Y"), Item("x", "X2")])
    assert [item.label for item in model.rows()] == ["X2", "Y"]
    assert model.get("x") == Item("x", "X2")


def test_roles_and_headers(model: KeyedTableModel[str, Item]) -> None:
    model.reset([Item("a", "A", 1)])
    index = model.index(0, 0)
    assert model.data(index) == "A"
    assert model.data(index, Qt.ItemDataRole.ToolTipRole) == "key a"
    assert model.data(index, ROW_ROLE) == Item("a", "A", 1)
    assert model.data(model.index(0, 1), Qt.ItemDataRole.ToolTipRole) is None
    assert model.data(QModelIndex()) is None
    assert model.headerData(1, Qt.Orientation.Horizontal) == "Count"
    assert model.headerData(0, Qt.Orientation.Vertical) is None
    assert model.rowCount(index) == 0
