"""One numbered subscription: a snapshot with a ``seq``, then pushed events applied in order."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

from app.broker.connection import BrokerConnection
from app.controllers.base import decode
from app.models.components import EventStep, next_event_step
from app.tasks import TaskSet
from backend.protocol.errors import RpcError

log = logging.getLogger(__name__)


class Numbered(Protocol):
    """A snapshot or an event of a numbered stream."""

    @property
    def seq(self) -> int:
        """The stream's position: an event's is one more than the previous event's."""
        ...


S = TypeVar("S", bound=Numbered)
E = TypeVar("E", bound=Numbered)


class NumberedSubscription(Generic[S, E]):
    """Follows one ``<x>:subscribe`` stream for its controller: ``on_snapshot`` gets the
    snapshot, ``on_event`` each later event in ``seq`` order. Events that overtake the snapshot
    wait for it, old ones are dropped, a gap subscribes again. Owns the subscribe task (spawned
    in the controller's ``TaskSet``)."""

    def __init__(
        self,
        tasks: TaskSet,
        connection: BrokerConnection,
        method: str,
        snapshot_type: type[S],
        event_type: type[E],
        *,
        on_snapshot: Callable[[S], None],
        on_event: Callable[[E], None],
        params: Any = None,
    ) -> None:
        self._tasks = tasks
        self._connection = connection
        self._method = method
        self._params = params
        self._snapshot_type = snapshot_type
        self._event_type = event_type
        self._on_snapshot = on_snapshot
        self._on_event = on_event
        self._seq: int | None = None
        self._early: list[E] = []  # events that overtook the snapshot
        self._task: asyncio.Task[None] | None = None

    @property
    def seq(self) -> int | None:
        """The last applied ``seq``; None while no snapshot is applied."""
        return self._seq

    def start(self) -> None:
        """Subscribe (again): cancel a running subscribe, read the snapshot, then catch up."""
        self.reset()
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # a session signal after the event loop stopped (app exit)
            return
        self._task = self._tasks.spawn(self._subscribe(), name=self._method)

    def reset(self) -> None:
        """Cancel a running subscribe and forget the stream (the session ended)."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self._seq = None
        # Buffered events came before the next subscribe call, so its snapshot covers them.
        self._early = []

    def feed(self, params: object) -> None:
        """An event of this stream was pushed: apply it now, later, or never."""
        event = decode(params, self._event_type)
        if event is not None:
            self._offer(event)

    async def _subscribe(self) -> None:
        try:
            raw = await self._connection.call(self._method, self._params)
        except RpcError as exc:
            log.info("%s failed: %s", self._method, exc)
            return
        snapshot = decode(raw, self._snapshot_type)
        if snapshot is None:
            return
        self._on_snapshot(snapshot)
        self._seq = snapshot.seq
        early, self._early = self._early, []
        for event in sorted(early, key=lambda e: e.seq):
            self._offer(event)  # after a gap among them the rest wait for the next snapshot

    def _offer(self, event: E) -> None:
        if self._seq is None:
            self._early.append(event)
            return
        step = next_event_step(self._seq, event.seq)
        if step is EventStep.APPLY:
            self._seq = event.seq
            self._on_event(event)
        elif step is EventStep.GAP:
            log.info(
                "%s: gap after seq %d (got %d); subscribing again",
                self._method,
                self._seq,
                event.seq,
            )
            self.start()
