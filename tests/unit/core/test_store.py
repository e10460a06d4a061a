"""The SQLite store: WAL, migrations, private file, corrupt file set aside, newer schema refused."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

import pytest

from backend.core.store import MIGRATIONS, Store, StoreError


async def test_open_migrates_to_the_latest_schema_in_wal_mode(tmp_path: Path) -> None:
    store = Store(tmp_path / "pair.db")
    await store.open()
    try:
        assert await store.schema_version() == len(MIGRATIONS)
        assert (await store.fetch_all("PRAGMA journal_mode"))[0][0] == "wal"
        assert stat.S_IMODE((tmp_path / "pair.db").stat().st_mode) == 0o600
        await store.execute("INSERT INTO meta (key, value) VALUES ('k', 'v')")
    finally:
        await store.close()
    reopened = Store(tmp_path / "pair.db")
    await reopened.open()
    try:
        assert await reopened.fetch_all("SELECT value FROM meta WHERE key='k'") == [("v",)]
    finally:
        await reopened.close()


async def test_a_later_migration_applies_on_top_of_an_older_database(tmp_path: Path) -> None:
    old = Store(tmp_path / "pair.db", migrations=MIGRATIONS[:1])
    await old.open()
    await old.close()
    extended = (*MIGRATIONS, "CREATE TABLE extra (id INTEGER PRIMARY KEY)")
    store = Store(tmp_path / "pair.db", migrations=extended)
    await store.open()
    try:
        assert await store.schema_version() == len(extended)
        assert await store.fetch_all("SELECT * FROM extra") == []
    finally:
        await store.close()


async def test_a_failing_migration_leaves_the_schema_untouched(tmp_path: Path) -> None:
    broken = (*MIGRATIONS, "CREATE TABLE good (id INTEGER); CREATE TABLE meta (dup TEXT)")
    store = Store(tmp_path / "pair.db", migrations=broken)
    with pytest.raises(Exception, match="already exists"):
        await store.open()
    await store.close()
    plain = Store(tmp_path / "pair.db")
    await plain.open()
    try:
        assert await plain.schema_version() == len(MIGRATIONS)
        tables = await plain.fetch_all("SELECT name FROM sqlite_master WHERE name='good'")
        assert tables == []
    finally:
        await plain.close()


async def test_a_corrupt_database_is_set_aside_and_a_new_one_made(tmp_path: Path) -> None:
    path = tmp_path / "pair.db"
    path.write_bytes(b"definitely not sqlite" * 100)
    store = Store(path)
    await store.open()
    try:
        assert store.set_aside_path is not None
        assert store.set_aside_path.read_bytes().startswith(b"definitely not sqlite")
        assert await store.schema_version() == len(MIGRATIONS)
    finally:
        await store.close()


async def test_a_database_from_a_newer_pair_is_refused(tmp_path: Path) -> None:
    newer = Store(tmp_path / "pair.db", migrations=(*MIGRATIONS, "CREATE TABLE x (y INTEGER)"))
    await newer.open()
    await newer.close()
    store = Store(tmp_path / "pair.db")
    with pytest.raises(StoreError, match="newer than this PAIR understands"):
        await store.open()
    await store.close()


async def test_a_new_database_and_an_upgrade_log_one_line_each(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="backend.core.store")
    for migrations in (MIGRATIONS[:1], MIGRATIONS, MIGRATIONS):
        store = Store(tmp_path / "pair.db", migrations=migrations)
        await store.open()
        await store.close()
    said = [record.getMessage() for record in caplog.records if "schema" in record.getMessage()]
    path = tmp_path / "pair.db"
    assert said == [
        f"database {path} created (schema 1)",
        f"database {path} migrated from schema 1 to {len(MIGRATIONS)}",
    ]
