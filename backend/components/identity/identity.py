"""The node's UUID: minted on first run, kept across runs, replaced when the data dir is a copy.

What a user would expect, and what happens:

- First run: a new UUID (v4) is minted and stored with its location (hashed machine id and
  the data dir's absolute path). The hostname is only a display name and plays no part.
- Same computer, same directory: the UUID is kept.
- Directory moved on the same computer (the original path no longer holds this node): the UUID
  is kept and the new path recorded; a move is not a new computer.
- Directory copied on the same computer (the original path still holds this node), or copied
  from another computer (the machine id differs): the copy gets a new UUID, the old one is kept
  in ``node_identity_history``, and the warning ``identity:copied`` says so. The original keeps
  its UUID, so the two nodes never share one unnoticed. Moving a node to a new computer
  therefore makes it a new node, which pairs again.
- A database written before locations were recorded keeps its UUID (adopted) and gets one now.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import msgspec

from backend.components.identity.location import (
    DataDirLocation,
    data_dir_location,
    directory_holds_node,
    machine_id,
)
from backend.core.clock import Clock
from backend.core.store import Store
from backend.core.supervisor import ErrorSink
from backend.protocol.types.base import NodeId

log = logging.getLogger(__name__)

COPIED_ERROR_ID = "identity:copied"
_KEYS = ("node_id", "node_machine", "node_data_dir", "node_created_at")

Verdict = Literal[
    "first-run",
    "kept",
    "adopted",
    "moved",
    "copied-from-another-computer",
    "copied-on-this-computer",
]
HoldsNode = Callable[[Path, str], bool]


class RecordedIdentity(msgspec.Struct, frozen=True):
    """The identity the data dir holds; ``location`` is None if written before locations were."""

    node_id: NodeId
    location: DataDirLocation | None
    created_at: float | None


class NodeIdentity(msgspec.Struct, frozen=True):
    """Who this node is after start-up, how that was decided, and the identity it replaced."""

    node_id: NodeId
    verdict: Verdict
    replaced: RecordedIdentity | None = None


def judge(
    recorded: RecordedIdentity | None, current: DataDirLocation, original_holds_node: HoldsNode
) -> Verdict:
    """Decide what the recorded identity means here (may call ``original_holds_node``)."""
    if recorded is None:
        return "first-run"
    before = recorded.location
    if before is None:
        return "adopted"
    if before.machine and current.machine and before.machine != current.machine:
        return "copied-from-another-computer"
    if before.data_dir == current.data_dir:
        return "kept"
    if original_holds_node(Path(before.data_dir), recorded.node_id):
        return "copied-on-this-computer"
    return "moved"


async def load_identity(
    store: Store,
    data_dir: Path,
    *,
    clock: Clock,
    read_machine_id: Callable[[], str | None] = machine_id,
) -> NodeIdentity:
    """This node's identity from ``store``, minted or replaced as ``judge`` decides."""
    current = await asyncio.to_thread(data_dir_location, data_dir, read_machine_id)
    recorded = await _read(store)

    def holds(path: Path, node_id: str) -> bool:
        return directory_holds_node(path, store.path.name, node_id)

    verdict = await asyncio.to_thread(judge, recorded, current, holds)
    now = clock.wall()
    if recorded is None or verdict.startswith("copied"):
        identity = NodeIdentity(NodeId(str(uuid.uuid4())), verdict, replaced=recorded)
        if recorded is not None:
            await _retire(store, recorded, verdict, identity.node_id, now)
        await _write(store, identity.node_id, current, now)
    else:
        identity = NodeIdentity(recorded.node_id, verdict)
        if recorded.location != current:
            await _write(store, recorded.node_id, current, recorded.created_at or now)
    _log(identity, recorded)
    return identity


def report_identity(errors: ErrorSink, identity: NodeIdentity) -> None:
    """Raise the ``identity:copied`` warning when this start replaced a copied identity."""
    old = identity.replaced
    if old is None:
        return
    where = (
        "from another computer"
        if identity.verdict == "copied-from-another-computer"
        else f"from {old.location.data_dir if old.location else 'another directory'}, "
        "which still holds that node"
    )
    errors.raise_error(
        COPIED_ERROR_ID,
        f"This data directory was copied {where} (node {old.node_id}). So that two nodes never "
        f"share one identity, this node is now {identity.node_id}; the old identity is kept on "
        "record. Peers see it as a new node that pairs again.",
        severity="warning",
    )


async def _read(store: Store) -> RecordedIdentity | None:
    rows = await store.fetch_all(
        f"SELECT key, value FROM meta WHERE key IN ({', '.join('?' * len(_KEYS))})", _KEYS
    )
    values = {str(key): str(value) for key, value in rows}
    node_id = values.get("node_id")
    if not node_id:
        return None
    if "node_data_dir" not in values:
        return RecordedIdentity(NodeId(node_id), None, None)
    location = DataDirLocation(values.get("node_machine", ""), values["node_data_dir"])
    try:
        created_at: float | None = float(values.get("node_created_at", ""))
    except ValueError:
        created_at = None
    return RecordedIdentity(NodeId(node_id), location, created_at)


async def _write(store: Store, node_id: NodeId, where: DataDirLocation, created_at: float) -> None:
    # One statement, so the id and its location change together or not at all.
    await store.execute(
        "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?), (?, ?), (?, ?), (?, ?)",
        (
            *("node_id", node_id),
            *("node_machine", where.machine),
            *("node_data_dir", where.data_dir),
            *("node_created_at", repr(created_at)),
        ),
    )


async def _retire(
    store: Store, old: RecordedIdentity, verdict: Verdict, successor: str, now: float
) -> None:
    # Written before the new id, and replaced if a crash in between makes us mint again.
    where = old.location or DataDirLocation("", "")
    await store.execute(
        "INSERT OR REPLACE INTO node_identity_history "
        "(node_id, machine, data_dir, created_at, retired_at, reason, successor) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            old.node_id,
            where.machine,
            where.data_dir,
            old.created_at,
            now,
            verdict,
            successor,
        ),
    )


def _log(identity: NodeIdentity, recorded: RecordedIdentity | None) -> None:
    if identity.verdict == "first-run":
        log.info("new node identity %s", identity.node_id)
    elif identity.verdict == "moved" and recorded is not None and recorded.location:
        log.info(
            "data directory moved from %s; node identity %s kept",
            recorded.location.data_dir,
            identity.node_id,
        )
    elif identity.replaced is not None:
        log.warning(
            "data directory is a copy (%s): node %s is now %s",
            identity.verdict,
            identity.replaced.node_id,
            identity.node_id,
        )
