"""What every store shares: one numbered subscription per session, its state, and its signals."""

from __future__ import annotations

from typing import Generic

from PySide6.QtCore import QObject, Signal

from app.broker.connection import BrokerConnection
from app.stores.subscription import E, NumberedSubscription, P, S
from backend.common.tasks import TaskSet
from backend.protocol.contract import Method, Push
from backend.protocol.errors import RpcError


class StreamStore(QObject, Generic[P, S, E]):
    """The GUI's copy of one numbered stream of the broker. Subscribes on every new session,
    hands the snapshot to ``_load`` and each event, in ``seq`` order, to ``_apply``; forgets
    everything when the session ends. Subclasses hold the state and emit the finer signals.
    Owns the subscription and its task."""

    reset = Signal()  # a snapshot replaced the state (a new session, or after a gap)
    cleared = Signal()  # the session ended: the state is empty
    failed = Signal(str)  # the subscribe call failed; the message says why

    def __init__(
        self,
        connection: BrokerConnection,
        method: Method[P, S],
        push: Push[E],
        params: P | None = None,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.connection = connection
        self.error: str | None = None  # why the last subscribe failed; None once it worked
        self._loaded = False
        self._tasks = TaskSet(type(self).__name__)
        self._subscription: NumberedSubscription[P, S, E] = NumberedSubscription(
            self._tasks,
            connection,
            method,
            push,
            on_snapshot=self._on_subscription_snapshot,
            on_event=self._apply,
            on_failure=self._on_subscription_failure,
            params=params,
        )
        connection.session_ready.connect(self._on_connection_session_ready)
        connection.session_changed.connect(self._on_connection_session_changed)
        connection.notification_received.connect(self._on_connection_notification_received)

    @property
    def loaded(self) -> bool:
        """Whether a snapshot was applied in this session (it stays through a gap's re-read)."""
        return self._loaded

    def resubscribe(self) -> None:
        """Read the snapshot again (after a failure); the state stays until it arrives."""
        if self.connection.ownership is not None:
            self._subscription.start()

    async def close(self) -> None:
        """Cancel the subscribe task (bounded)."""
        await self._tasks.close(timeout=2.0)

    def _load(self, snapshot: S) -> None:
        """Replace the state with ``snapshot`` (override)."""
        raise NotImplementedError

    def _apply(self, event: E) -> None:
        """Apply the next event and emit its signal (override)."""
        raise NotImplementedError

    def _forget(self) -> None:
        """Empty the state (override)."""
        raise NotImplementedError

    def _on_subscription_snapshot(self, snapshot: S) -> None:
        self._load(snapshot)
        self._loaded = True
        self.error = None
        self.reset.emit()

    def _on_subscription_failure(self, exc: RpcError) -> None:
        self.error = exc.message
        self.failed.emit(exc.message)

    def _on_connection_session_ready(self) -> None:
        self._subscription.start()

    def _on_connection_session_changed(self) -> None:
        if self.connection.ownership is None:
            self._subscription.reset()
            self._forget()
            self._loaded = False
            self.error = None
            self.cleared.emit()

    def _on_connection_notification_received(self, method: str, params: object) -> None:
        if method == self._subscription.push.name:
            self._subscription.feed(params)
