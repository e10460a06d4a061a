"""Conversations whose KV was parked in a file when their slot went to another conversation
(docs/SCHEDULER.md, "Parking").

llama-server saves a slot's KV to a file of its slot folder and restores it into any slot. So
instead of losing a conversation's cache when its slot is handed over (the erase that keeps it
from the next conversation), the scheduler saves it first, under a name derived from the
session, and restores it when that session is admitted to a slot that is not its own. The files
are bounded in number and bytes (the oldest go first) and belong to one run of the engine.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

import msgspec

from backend.protocol.proxy import PARKED_PREFIX, PARKED_SUFFIX

MAX_PARKED = 256
MAX_PARKED_BYTES = 4 * 1024**3


def parked_name(session: str) -> str:
    """The file a session's KV is parked in (no part of the session itself shows)."""
    digest = hashlib.sha256(session.encode()).hexdigest()[:32]
    return f"{PARKED_PREFIX}{digest}{PARKED_SUFFIX}"


class Parking(msgspec.Struct):
    """Which sessions have a parked KV file and how big each is, oldest first."""

    max_entries: int = MAX_PARKED
    max_bytes: int = MAX_PARKED_BYTES
    _files: OrderedDict[str, tuple[str, int]] = msgspec.field(default_factory=OrderedDict)

    def file_of(self, session: str | None) -> str | None:
        """The file holding ``session``'s parked KV, if any."""
        if session is None:
            return None
        entry = self._files.get(session)
        return entry[0] if entry is not None else None

    def parked(self, session: str, size: int) -> list[str]:
        """``session``'s KV is in its file now (``size`` bytes); the files to delete to stay
        within the bounds (never the one just written)."""
        self._files[session] = (parked_name(session), max(0, size))
        self._files.move_to_end(session)
        evicted: list[str] = []
        while len(self._files) > 1 and (
            len(self._files) > self.max_entries or self.total_bytes() > self.max_bytes
        ):
            _, (name, _) = self._files.popitem(last=False)
            evicted.append(name)
        return evicted

    def restored(self, session: str) -> str | None:
        """``session``'s KV is in a slot again: its file is stale (to delete)."""
        entry = self._files.pop(session, None)
        return entry[0] if entry is not None else None

    def clear(self) -> list[str]:
        """Every parked file (the engine relaunched: they belong to its last run)."""
        names = [name for name, _ in self._files.values()]
        self._files.clear()
        return names

    def total_bytes(self) -> int:
        """Bytes parked."""
        return sum(size for _, size in self._files.values())

    def __len__(self) -> int:
        return len(self._files)
