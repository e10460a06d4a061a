"""Pure functions over the errors registry's state."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgspec

from backend.protocol.types.base import NodeId
from backend.protocol.types.broker import ErrorReport, ServiceError

ErrorKey = tuple[NodeId, str]  # (node_id, id)
ErrorState = Mapping[ErrorKey, ServiceError]


def apply_report(
    state: ErrorState, report: ErrorReport, *, local_node: NodeId, now: float
) -> dict[ErrorKey, ServiceError] | None:
    """The state after ``report``, or None when nothing visible changes.

    A report older than the stored entry is dropped; the first report's creation time is kept.
    """
    node_id = report.node_id or local_node
    timestamp = report.timestamp if report.timestamp is not None else now
    key = (node_id, report.id)
    current = state.get(key)
    if current is not None and timestamp < current.updated_at:
        return None
    entry = ServiceError(
        id=report.id,
        node_id=node_id,
        message=report.message,
        severity=report.severity,
        action=report.action,
        created_at=current.created_at if current is not None else timestamp,
        updated_at=timestamp,
        engine=report.engine,
        model=report.model,
    )
    if current is not None and _same_content(current, entry):
        return None
    return {**state, key: entry}


def apply_clear(
    state: ErrorState, node_id: NodeId, error_id: str
) -> dict[ErrorKey, ServiceError] | None:
    """The state without that entry, or None when it was not there."""
    key = (node_id, error_id)
    if key not in state:
        return None
    return {k: v for k, v in state.items() if k != key}


def replace_node(
    state: ErrorState, node_id: NodeId, entries: Iterable[ServiceError]
) -> dict[ErrorKey, ServiceError] | None:
    """The state with ``node_id``'s entries replaced by ``entries`` (a member's own list as it
    sent it), or None when nothing changes. Entries of other nodes in ``entries`` are dropped."""
    mine = {(node_id, entry.id): entry for entry in entries if entry.node_id == node_id}
    current = {key: entry for key, entry in state.items() if key[0] == node_id}
    if mine == current:
        return None
    kept = {key: entry for key, entry in state.items() if key[0] != node_id}
    return {**kept, **mine}


def ordered(state: ErrorState) -> list[ServiceError]:
    """Entries sorted by id, then node, as ``errors:update`` carries them."""
    return [state[key] for key in sorted(state, key=lambda key: (key[1], key[0]))]


def _same_content(left: ServiceError, right: ServiceError) -> bool:
    return msgspec.structs.replace(left, updated_at=0.0) == msgspec.structs.replace(
        right, updated_at=0.0
    )
