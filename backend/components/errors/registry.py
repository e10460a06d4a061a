"""The errors registry service: holds the entries, pushes a full snapshot after each change."""

from __future__ import annotations

from collections.abc import Callable

from backend.components.errors import state as error_state
from backend.core.clock import Clock
from backend.protocol import errors
from backend.protocol.types.base import NodeId
from backend.protocol.types.broker import (
    ErrorAction,
    ErrorClear,
    ErrorReport,
    ServiceError,
    Severity,
)


class ErrorsRegistry:
    """In-memory registry keyed by (node, id). Producers re-raise after a restart, so no disk."""

    def __init__(
        self, *, node_id: NodeId, clock: Clock, on_update: Callable[[list[ServiceError]], None]
    ) -> None:
        self._node_id = node_id
        self._clock = clock
        self._on_update = on_update
        self._state: dict[error_state.ErrorKey, ServiceError] = {}

    def snapshot(self) -> list[ServiceError]:
        """Every entry, sorted by id then node."""
        return error_state.ordered(self._state)

    def report(self, report: ErrorReport) -> None:
        """Add or replace an entry (``errors:report``)."""
        if not report.id.strip():
            raise errors.InvalidParams("Invalid params: error id must not be empty")
        if not report.message.strip():
            raise errors.InvalidParams("Invalid params: error message must not be empty")
        self._commit(
            error_state.apply_report(
                self._state, report, local_node=self._node_id, now=self._clock.wall()
            )
        )

    def clear(self, params: ErrorClear) -> None:
        """Dismiss an entry (``errors:clear``); a later report brings it back."""
        self._commit(
            error_state.apply_clear(self._state, params.node_id or self._node_id, params.id)
        )

    def replace_node(self, node_id: NodeId, entries: list[ServiceError]) -> None:
        """Hold exactly ``entries`` for another node (a member's own errors, mirrored)."""
        if node_id == self._node_id:
            raise ValueError("this node's errors are its own")
        self._commit(error_state.replace_node(self._state, node_id, entries))

    def raise_error(
        self,
        error_id: str,
        message: str,
        *,
        severity: Severity = "error",
        action: ErrorAction | None = None,
    ) -> None:
        """Raise or update a local error from inside the broker."""
        self.report(ErrorReport(id=error_id, message=message, severity=severity, action=action))

    def clear_error(self, error_id: str) -> None:
        """Clear a local error from inside the broker."""
        self.clear(ErrorClear(id=error_id))

    def _commit(self, new_state: dict[error_state.ErrorKey, ServiceError] | None) -> None:
        if new_state is None:
            return
        self._state = new_state
        self._on_update(self.snapshot())
