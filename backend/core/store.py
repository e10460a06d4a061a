"""The durable store: one SQLite database (WAL) per node, with numbered schema migrations.

SQLite calls block, so the store owns one thread and every query runs there; the event loop
only awaits. A database that SQLite cannot open is set aside (never deleted) and a new one made.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from backend.common.files import ensure_private_dir, set_aside

log = logging.getLogger(__name__)
T = TypeVar("T")
Row = tuple[Any, ...]

# Append only: a released migration never changes; its index + 1 is the schema version.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE broker_runs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        pid INTEGER NOT NULL,
        version TEXT NOT NULL,
        started_at REAL NOT NULL,
        stopped_at REAL
    );
    """,
    """
    CREATE TABLE engine_desired (
        engine TEXT PRIMARY KEY,
        enabled INTEGER NOT NULL,
        updated_at REAL NOT NULL
    );
    CREATE TABLE engine_processes (
        pid INTEGER PRIMARY KEY,
        engine TEXT NOT NULL,
        create_time REAL NOT NULL,
        started_at REAL NOT NULL
    );
    """,
    """
    CREATE TABLE node_identity_history (
        node_id TEXT PRIMARY KEY,
        machine TEXT NOT NULL,
        data_dir TEXT NOT NULL,
        created_at REAL,
        retired_at REAL NOT NULL,
        reason TEXT NOT NULL,
        successor TEXT NOT NULL
    );
    """,
    """
    CREATE TABLE manual_nodes (
        id TEXT PRIMARY KEY,
        address TEXT NOT NULL,
        port INTEGER NOT NULL,
        name TEXT,
        added_at REAL NOT NULL
    );
    """,
    """
    CREATE TABLE jobs (
        key TEXT PRIMARY KEY,
        engine TEXT NOT NULL,
        model TEXT NOT NULL,
        origin TEXT NOT NULL,
        run_id TEXT NOT NULL,
        path TEXT NOT NULL,
        state TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        target TEXT,
        serving TEXT,
        created_at REAL NOT NULL,
        started_at REAL,
        completed_at REAL,
        error TEXT,
        seq INTEGER NOT NULL,
        updated_at REAL NOT NULL
    );
    CREATE INDEX jobs_newest ON jobs (created_at DESC, key DESC);
    """,
    """
    CREATE TABLE cluster_state (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE cluster_members (
        node_id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        cert_der BLOB NOT NULL,
        fingerprint TEXT NOT NULL,
        added_by TEXT NOT NULL,
        added_at REAL NOT NULL,
        provisional INTEGER NOT NULL,
        address TEXT NOT NULL,
        node_port INTEGER NOT NULL
    );
    CREATE TABLE cluster_tombstones (
        fingerprint TEXT PRIMARY KEY,
        node_id TEXT NOT NULL,
        removed_by TEXT NOT NULL,
        removed_at REAL NOT NULL
    );
    """,
    """
    ALTER TABLE cluster_members ADD COLUMN endorsements BLOB NOT NULL DEFAULT x'';
    ALTER TABLE cluster_tombstones ADD COLUMN record BLOB NOT NULL DEFAULT x'';
    """,
    """
    CREATE TABLE api_keys (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        prefix TEXT NOT NULL,
        hash TEXT NOT NULL UNIQUE,
        created_at REAL NOT NULL,
        last_used_at REAL
    );
    """,
    """
    ALTER TABLE api_keys ADD COLUMN scope TEXT NOT NULL DEFAULT 'inference';
    ALTER TABLE jobs ADD COLUMN client TEXT;
    ALTER TABLE jobs ADD COLUMN client_address TEXT;
    """,
    """
    ALTER TABLE jobs ADD COLUMN first_token_at REAL;
    ALTER TABLE jobs ADD COLUMN chunks INTEGER;
    ALTER TABLE jobs ADD COLUMN tokens INTEGER;
    ALTER TABLE jobs ADD COLUMN timeline TEXT;
    """,
    """
    ALTER TABLE jobs ADD COLUMN note TEXT;
    CREATE TABLE model_aliases (
        name TEXT PRIMARY KEY,
        target TEXT NOT NULL,
        created_at REAL NOT NULL
    );
    """,
)


class StoreError(Exception):
    """The database could not be opened or migrated."""


class Store:
    """Owns the SQLite connection and the single thread that uses it."""

    def __init__(self, path: Path, migrations: Sequence[str] = MIGRATIONS) -> None:
        self.path = path
        self._migrations = migrations
        self._connection: sqlite3.Connection | None = None
        self._executor: ThreadPoolExecutor | None = None
        self.set_aside_path: Path | None = None

    async def open(self) -> None:
        """Open (creating or migrating as needed)."""
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pair-store")
        await self._in_thread(self._open_sync)

    async def close(self) -> None:
        """Checkpoint and close; idempotent."""
        if self._executor is None:
            return
        if self._connection is not None:
            await self._in_thread(self._close_sync)
        self._executor.shutdown(wait=True)
        self._executor = None

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one statement in its own transaction; return ``lastrowid``."""
        return await self._in_thread(lambda: self._execute_sync(sql, params))

    async def transaction(
        self, statements: Sequence[tuple[str, Sequence[Any]]], *, durable: bool = False
    ) -> None:
        """Run ``statements`` all or nothing. ``durable`` waits for the disk (``synchronous=
        FULL`` for this commit), for facts another computer acts on once we say so."""
        await self._in_thread(lambda: self._transaction_sync(statements, durable))

    async def fetch_all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """Rows of a query."""
        return await self._in_thread(lambda: self._conn().execute(sql, params).fetchall())

    async def schema_version(self) -> int:
        """The applied migration count."""
        rows = await self.fetch_all("PRAGMA user_version")
        return int(rows[0][0])

    async def _in_thread(self, work: Callable[[], T]) -> T:
        if self._executor is None:
            raise StoreError("the store is not open")
        return await asyncio.get_running_loop().run_in_executor(self._executor, work)

    def _conn(self) -> sqlite3.Connection:
        if self._connection is None:
            raise StoreError("the store is not open")
        return self._connection

    def _open_sync(self) -> None:
        ensure_private_dir(self.path.parent)
        try:
            self._connection = self._connect_and_migrate()
        except sqlite3.DatabaseError as exc:
            if not self.path.exists():
                raise StoreError(f"cannot open {self.path}: {exc}") from exc
            self.set_aside_path = set_aside(self.path, "corrupt", int(time.time()))
            log.error(
                "database %s is unreadable (%s); kept as %s, starting a new one",
                self.path,
                exc,
                self.set_aside_path,
            )
            for suffix in ("-wal", "-shm"):
                stale = self.path.with_name(self.path.name + suffix)
                if stale.exists():
                    os.replace(
                        stale, self.set_aside_path.with_name(self.set_aside_path.name + suffix)
                    )
            self._connection = self._connect_and_migrate()

    def _connect_and_migrate(self) -> sqlite3.Connection:
        connection = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        try:
            os.chmod(self.path, 0o600)
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=NORMAL")
            connection.execute("PRAGMA foreign_keys=ON")
            self._migrate(connection)
        except BaseException:
            connection.close()
            raise
        return connection

    def _migrate(self, connection: sqlite3.Connection) -> None:
        version = int(connection.execute("PRAGMA user_version").fetchone()[0])
        if version > len(self._migrations):
            raise StoreError(
                f"{self.path} has schema {version}, newer than this PAIR understands "
                f"({len(self._migrations)}); update PAIR"
            )
        for index in range(version, len(self._migrations)):
            connection.execute("BEGIN IMMEDIATE")
            try:
                for statement in _statements(self._migrations[index]):
                    connection.execute(statement)
                connection.execute(f"PRAGMA user_version = {index + 1}")
            except BaseException:
                connection.execute("ROLLBACK")
                raise
            connection.execute("COMMIT")
        latest = len(self._migrations)
        if version == latest:
            return
        # One line for the whole run: a new database takes every migration at once.
        if version == 0:
            log.info("database %s created (schema %d)", self.path, latest)
        else:
            log.info("database %s migrated from schema %d to %d", self.path, version, latest)

    def _execute_sync(self, sql: str, params: Sequence[Any]) -> int:
        cursor = self._conn().execute(sql, params)
        return int(cursor.lastrowid or 0)

    def _transaction_sync(
        self, statements: Sequence[tuple[str, Sequence[Any]]], durable: bool
    ) -> None:
        connection = self._conn()
        if durable:
            connection.execute("PRAGMA synchronous=FULL")
        try:
            connection.execute("BEGIN IMMEDIATE")
            try:
                for sql, params in statements:
                    connection.execute(sql, params)
            except BaseException:
                connection.execute("ROLLBACK")
                raise
            connection.execute("COMMIT")
        finally:
            if durable:
                connection.execute("PRAGMA synchronous=NORMAL")

    def _close_sync(self) -> None:
        connection = self._conn()
        try:
            connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            connection.close()
            self._connection = None


def _statements(script: str) -> list[str]:
    """Split a migration into statements (migrations contain no semicolons inside literals)."""
    return [part.strip() for part in script.split(";") if part.strip()]
