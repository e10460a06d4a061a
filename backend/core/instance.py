"""One broker per data directory: an OS file lock plus a record of who holds it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import filelock
import msgspec

from backend.common.files import ensure_private_dir, write_private_atomic


class BrokerRecord(msgspec.Struct, frozen=True):
    """Who runs the broker for a data directory."""

    pid: int
    started_at: float
    control_address: str
    version: str


class AlreadyRunning(Exception):
    """Another broker holds the data directory."""

    def __init__(self, data_dir: Path, record: BrokerRecord | None) -> None:
        self.record = record
        if record is None:
            detail = "its details are not recorded yet"
        else:
            detail = f"pid {record.pid}, control socket {record.control_address}"
        super().__init__(f"another PAIR broker is already running for {data_dir} ({detail})")


class InstanceLock:
    """Held for the broker's lifetime; the OS releases it if the process dies."""

    def __init__(self, data_dir: Path) -> None:
        self._data_dir = data_dir
        self._lock = filelock.FileLock(str(data_dir / "broker.lock"), timeout=0, mode=0o600)
        self._record_path = data_dir / "broker.json"

    def acquire(self, record: BrokerRecord) -> None:
        """Take the lock and publish ``record``; raises AlreadyRunning."""
        ensure_private_dir(self._data_dir)
        try:
            self._lock.acquire()
        except filelock.Timeout:
            raise AlreadyRunning(self._data_dir, read_record(self._data_dir)) from None
        write_private_atomic(
            self._record_path,
            json.dumps(
                {
                    "pid": record.pid,
                    "started_at": record.started_at,
                    "control_address": record.control_address,
                    "version": record.version,
                }
            ).encode(),
        )

    def release(self) -> None:
        """Remove the record and release the lock; idempotent."""
        if not self._lock.is_locked:
            return
        record = read_record(self._data_dir)
        if record is not None and record.pid == os.getpid():
            self._record_path.unlink(missing_ok=True)
        self._lock.release()


def read_record(data_dir: Path) -> BrokerRecord | None:
    """The published record of the broker for ``data_dir``, if readable."""
    try:
        raw = json.loads((data_dir / "broker.json").read_text())
        return BrokerRecord(
            pid=int(raw["pid"]),
            started_at=float(raw["started_at"]),
            control_address=str(raw["control_address"]),
            version=str(raw["version"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
