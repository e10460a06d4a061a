"""Optimistic state: what the user just asked for, shown at once until the backend confirms it.

One store for the whole app, keyed by node, engine and model (model empty for engine actions).
A click calls ``begin``; the controller that sees the backend's truth (a state change, a model
list, progress, or an error about that node/engine/model) calls ``settle``; otherwise the entry
expires after its timeout (60 s by default; callers pass the ones below, derived from the
backend's own deadlines). Another member's keys carry its node id: the truth about them is that
member's state as its link reports it, and a member that cannot be reached or leaves the cluster
drops its entries (``settle_node``). A broker that goes away drops everything (``clear_all``).
"""

from __future__ import annotations

import time
from typing import NamedTuple

import msgspec
from msgspec.structs import replace
from PySide6.QtCore import QObject, QTimer, Signal

from backend.protocol.types.base import EngineName, NodeId

DEFAULT_TIMEOUT_S = 60.0


class BackendDeadlines(msgspec.Struct, frozen=True):
    """The longest the broker itself lets each operation take (seconds), from its bundled
    manifests and its engine runner: the one record of them on the app's side. The app's
    timeouts are derived from these; ``tests/unit/test_app_timeouts.py`` computes the real
    ones from the backend and fails when one here is shorter."""

    model_load: float = 720.0  # load_model's timeout_s (Ollama, LM Studio): a cold load
    model_unload: float = 120.0  # an action's default timeout_s
    model_delete: float = 120.0  # a delete that does not restart the engine
    delete_and_restart: float = 320.0  # LM Studio: the delete, then its stop and start
    engine_start: float = 600.0  # start commands (120 s each) and the readiness probe
    engine_stop: float = 30.0  # a stop command (its grace + 10 s), or a signal's grace
    pull_silence: float = 60.0  # the first answer of a download before it reports progress

    @property
    def engine_restart(self) -> float:
        """A restart (also a running engine's port move): a stop, then a start."""
        return self.engine_stop + self.engine_start


BACKEND = BackendDeadlines()
# The RPC waits this much longer than the backend's deadline, so the broker's own error (which
# says what failed) is what the user reads; a pending mark waits as much again, so the RPC's
# answer, or its timeout, always comes before the safety net gives up.
MARGIN_S = 60.0


def call_timeout(backend_s: float) -> float:
    """How long to wait for the broker's answer to an operation it bounds by ``backend_s``."""
    return backend_s + MARGIN_S


def pending_timeout(backend_s: float) -> float:
    """How long a pending mark of an operation the broker bounds by ``backend_s`` lives."""
    return call_timeout(backend_s) + MARGIN_S


COLD_LOAD_TIMEOUT_S = pending_timeout(BACKEND.model_load)
LMSTUDIO_DELETE_TIMEOUT_S = pending_timeout(BACKEND.delete_and_restart)
MODEL_ACTION_TIMEOUT_S = pending_timeout(
    max(BACKEND.model_unload, BACKEND.model_delete, BACKEND.pull_silence)
)


class PendingKey(NamedTuple):
    """What a pending action is about: ``model`` is "" for engine-wide actions."""

    node: NodeId
    engine: EngineName
    model: str = ""


class Pending(msgspec.Struct, frozen=True):
    """One action in flight: ``action`` is a verb the view shows ("Starting", "Loading", ...)."""

    key: PendingKey
    action: str
    since: float
    timeout_s: float
    token: int


class PendingActions(QObject):
    """The store. ``changed`` carries the key whose pending state appeared or went away;
    ``expired`` the key whose action timed out without the backend confirming it."""

    changed = Signal(object)
    expired = Signal(object)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._entries: dict[PendingKey, Pending] = {}
        self._tokens = 0

    def begin(self, key: PendingKey, action: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        """Show ``action`` for ``key`` now; a newer action replaces an older one."""
        self._tokens += 1
        self._arm(Pending(key, action, time.monotonic(), timeout_s, self._tokens))
        self.changed.emit(key)

    def extend(self, key: PendingKey) -> bool:
        """Progress arrived for ``key``: restart its safety timeout (True if it was pending).

        For long actions that report progress (installs, pulls): the timeout then means "no
        sign of life for that long" rather than "not finished in that long".
        """
        entry = self._entries.get(key)
        if entry is None:
            return False
        self._tokens += 1
        self._arm(replace(entry, token=self._tokens))
        return True

    def get(self, key: PendingKey) -> Pending | None:
        """The pending action for ``key``, if any."""
        return self._entries.get(key)

    def action(self, key: PendingKey) -> str | None:
        """The verb to show for ``key``, or None."""
        entry = self._entries.get(key)
        return entry.action if entry is not None else None

    def settle(self, key: PendingKey) -> bool:
        """The backend's truth arrived for ``key``: drop its pending state (True if it had one)."""
        if self._entries.pop(key, None) is None:
            return False
        self.changed.emit(key)
        return True

    def settle_engine(self, node: NodeId, engine: EngineName) -> None:
        """Truth about a whole engine (it stopped, crashed, restarted): drop all its entries."""
        for key in [k for k in self._entries if k.node == node and k.engine == engine]:
            self.settle(key)

    def settle_node(self, node: NodeId) -> None:
        """Nothing about ``node`` can be confirmed any more (its link went down, it left)."""
        for key in [k for k in self._entries if k.node == node]:
            self.settle(key)

    def clear_all(self) -> None:
        """The broker went away: nothing pending can be confirmed any more."""
        keys = list(self._entries)
        self._entries.clear()
        for key in keys:
            self.changed.emit(key)

    def __len__(self) -> int:
        return len(self._entries)

    def _arm(self, entry: Pending) -> None:
        self._entries[entry.key] = entry
        QTimer.singleShot(
            int(entry.timeout_s * 1000), self, lambda: self._expire(entry.key, entry.token)
        )

    def _expire(self, key: PendingKey, token: int) -> None:
        entry = self._entries.get(key)
        if entry is None or entry.token != token:
            return
        del self._entries[key]
        self.changed.emit(key)
        self.expired.emit(key)
