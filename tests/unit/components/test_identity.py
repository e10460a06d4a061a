"""Node identity: minted once, kept, moved with its directory, replaced when a copy is detected."""

from __future__ import annotations

import shutil
import sqlite3
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from backend.components.identity.identity import (
    COPIED_ERROR_ID,
    NodeIdentity,
    RecordedIdentity,
    judge,
    load_identity,
    report_identity,
)
from backend.components.identity.location import (
    DataDirLocation,
    data_dir_location,
    directory_holds_node,
    hash_machine_id,
    machine_id,
)
from backend.core.store import Store
from tests.fakes import FakeClock, RecordingErrors

HERE = "machine-a"


async def _start(
    data_dir: Path, machine: str | None = HERE, clock: FakeClock | None = None
) -> NodeIdentity:
    """One broker start's identity step against the store in ``data_dir``."""
    store = Store(data_dir / "pair.db")
    await store.open()
    try:
        return await load_identity(
            store, data_dir, clock=clock or FakeClock(), read_machine_id=lambda: machine
        )
    finally:
        await store.close()


def _history(data_dir: Path) -> list[tuple[str, str, str]]:
    with sqlite3.connect(data_dir / "pair.db") as connection:
        rows = connection.execute(
            "SELECT node_id, reason, successor FROM node_identity_history"
        ).fetchall()
    return [(str(a), str(b), str(c)) for a, b, c in rows]


async def test_first_run_mints_a_uuid_and_later_runs_keep_it(tmp_path: Path) -> None:
    first = await _start(tmp_path / "node")
    assert first.verdict == "first-run" and first.replaced is None
    assert uuid.UUID(first.node_id).version == 4
    second = await _start(tmp_path / "node")
    assert (second.node_id, second.verdict) == (first.node_id, "kept")
    errors = RecordingErrors()
    report_identity(errors, second)
    assert errors.raised == []


async def test_a_directory_copied_from_another_computer_gets_a_new_identity(
    tmp_path: Path,
) -> None:
    original = await _start(tmp_path / "node", machine="machine-a")
    copy = await _start(tmp_path / "node", machine="machine-b")
    assert copy.verdict == "copied-from-another-computer"
    assert copy.node_id != original.node_id
    assert copy.replaced is not None and copy.replaced.node_id == original.node_id
    assert _history(tmp_path / "node") == [
        (original.node_id, "copied-from-another-computer", copy.node_id)
    ]
    errors = RecordingErrors()
    report_identity(errors, copy)
    message = errors.open[COPIED_ERROR_ID]
    assert original.node_id in message and copy.node_id in message
    assert "another computer" in message
    again = await _start(tmp_path / "node", machine="machine-b")
    assert (again.node_id, again.verdict) == (copy.node_id, "kept")


async def test_a_copy_on_the_same_computer_gets_a_new_identity_and_the_original_keeps_its(
    tmp_path: Path,
) -> None:
    original = await _start(tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    copy = await _start(tmp_path / "b")
    assert copy.verdict == "copied-on-this-computer"
    assert copy.node_id != original.node_id
    errors = RecordingErrors()
    report_identity(errors, copy)
    assert str((tmp_path / "a").resolve()) in errors.open[COPIED_ERROR_ID]
    back = await _start(tmp_path / "a")
    assert (back.node_id, back.verdict) == (original.node_id, "kept")


async def test_a_moved_directory_keeps_its_identity(tmp_path: Path) -> None:
    original = await _start(tmp_path / "a")
    (tmp_path / "a").rename(tmp_path / "b")
    moved = await _start(tmp_path / "b")
    assert (moved.node_id, moved.verdict, moved.replaced) == (original.node_id, "moved", None)
    assert (await _start(tmp_path / "b")).verdict == "kept", "the new place is recorded"
    assert _history(tmp_path / "b") == []


async def test_an_identity_from_before_locations_were_recorded_is_adopted(tmp_path: Path) -> None:
    store = Store(tmp_path / "node" / "pair.db")
    await store.open()
    await store.execute("INSERT INTO meta (key, value) VALUES ('node_id', 'legacy-id')")
    await store.close()
    adopted = await _start(tmp_path / "node", machine="machine-z")
    assert (adopted.node_id, adopted.verdict, adopted.replaced) == ("legacy-id", "adopted", None)
    assert (await _start(tmp_path / "node", machine="machine-z")).verdict == "kept"


async def test_an_unknown_machine_id_compares_only_the_directory(tmp_path: Path) -> None:
    first = await _start(tmp_path / "node", machine=None)
    later = await _start(tmp_path / "node", machine="machine-a")
    assert (later.node_id, later.verdict) == (first.node_id, "kept")


async def test_the_raw_machine_id_is_never_stored(tmp_path: Path) -> None:
    await _start(tmp_path / "node", machine="secret-machine-id")
    raw = (tmp_path / "node" / "pair.db").read_bytes()
    assert b"secret-machine-id" not in raw
    assert hash_machine_id("secret-machine-id").encode() in raw


def _recorded(machine: str, data_dir: str) -> RecordedIdentity:
    return RecordedIdentity("n1", DataDirLocation(machine, data_dir), 1.0)


def _never(_: Path, __: str) -> bool:
    raise AssertionError("the original directory must not be consulted")


def _holds(answer: bool) -> Callable[[Path, str], bool]:
    return lambda _path, _node: answer


@pytest.mark.parametrize(
    ("recorded", "current", "holds", "verdict"),
    [
        (None, DataDirLocation("m", "/d"), _never, "first-run"),
        (RecordedIdentity("n1", None, None), DataDirLocation("m", "/d"), _never, "adopted"),
        (_recorded("m", "/d"), DataDirLocation("m", "/d"), _never, "kept"),
        (_recorded("m", "/d"), DataDirLocation("x", "/d"), _never, "copied-from-another-computer"),
        (_recorded("m", "/d"), DataDirLocation("x", "/e"), _never, "copied-from-another-computer"),
        (_recorded("m", "/d"), DataDirLocation("m", "/e"), _holds(True), "copied-on-this-computer"),
        (_recorded("m", "/d"), DataDirLocation("m", "/e"), _holds(False), "moved"),
        (_recorded("", "/d"), DataDirLocation("x", "/d"), _never, "kept"),
        (_recorded("m", "/d"), DataDirLocation("", "/e"), _holds(False), "moved"),
    ],
)
def test_judge(
    recorded: RecordedIdentity | None,
    current: DataDirLocation,
    holds: Callable[[Path, str], bool],
    verdict: str,
) -> None:
    assert judge(recorded, current, holds) == verdict


def test_an_unreadable_original_database_counts_as_still_holding_the_node(tmp_path: Path) -> None:
    (tmp_path / "pair.db").write_bytes(b"this is not a database" * 100)
    assert directory_holds_node(tmp_path, "pair.db", "n1")
    assert not directory_holds_node(tmp_path / "missing", "pair.db", "n1")


def test_machine_id_comes_from_the_first_readable_file(tmp_path: Path) -> None:
    empty, real = tmp_path / "empty", tmp_path / "real"
    empty.write_text("\n")
    real.write_text("abc123\n")
    assert machine_id([tmp_path / "missing", empty, real]) == "abc123"
    assert machine_id([tmp_path / "missing"]) is None
    assert hash_machine_id(None) == ""
    assert hash_machine_id("abc123") != hash_machine_id("abc124")


def test_the_location_uses_the_resolved_directory(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    location = data_dir_location(tmp_path / "link", lambda: "m")
    assert location == DataDirLocation(hash_machine_id("m"), str((tmp_path / "real").resolve()))
