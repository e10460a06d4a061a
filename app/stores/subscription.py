"""One numbered subscription: a snapshot with a ``seq``, then pushed events applied in order."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from enum import StrEnum
from typing import Generic, Protocol, TypeVar

from app.broker.connection import BrokerConnection
from backend.common.tasks import TaskSet
from backend.protocol.contract import Method, Push
from backend.protocol.errors import BadResult, RpcError

log = logging.getLogger(__name__)


class Numbered(Protocol):
    """A snapshot or an event of a numbered stream."""

    @property
    def seq(self) -> int:
        """The stream's position: an event's is one more than the previous event's."""
        ...


P = TypeVar("P")
S = TypeVar("S", bound=Numbered)
E = TypeVar("E", bound=Numbered)


class EventStep(StrEnum):
    """What to do with a numbered event given the last applied ``seq``."""

    APPLY = "apply"  # the next event
    SKIP = "skip"  # already covered by the snapshot or an earlier event
    GAP = "gap"  # events were missed: subscribe again for a fresh snapshot


def next_event_step(last_seq: int, event_seq: int) -> EventStep:
    """Events after a snapshot apply in order; an old one is skipped, a jump is a gap."""
    if event_seq <= last_seq:
        return EventStep.SKIP
    return EventStep.APPLY if event_seq == last_seq + 1 else EventStep.GAP


class NumberedSubscription(Generic[P, S, E]):
    """Follows one ``<x>:subscribe`` stream: ``on_snapshot`` gets the snapshot, ``on_event``
    each later event in ``seq`` order. Events that overtake the snapshot wait for it, old ones
    are dropped, a gap subscribes again; a failed subscribe goes to ``on_failure``. Owns the
    subscribe task (spawned in its owner's ``TaskSet``)."""

    def __init__(
        self,
        tasks: TaskSet,
        connection: BrokerConnection,
        method: Method[P, S],
        push: Push[E],
        *,
        on_snapshot: Callable[[S], None],
        on_event: Callable[[E], None],
        on_failure: Callable[[RpcError], None] | None = None,
        params: P | None = None,
    ) -> None:
        self._tasks = tasks
        self._connection = connection
        self.method = method
        self.push = push
        self._params = params
        self._on_snapshot = on_snapshot
        self._on_event = on_event
        self._on_failure = on_failure
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
        # None for a session signal after the event loop stopped (app exit)
        self._task = self._tasks.spawn_if_running(self._subscribe(), name=self.method.name)

    def reset(self) -> None:
        """Cancel a running subscribe and forget the stream (the session ended)."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self._seq = None
        # Buffered events came before the next subscribe call, so its snapshot covers them.
        self._early = []

    def feed(self, params: object) -> None:
        """An event of this stream was pushed (raw params): apply it now, later, or never."""
        try:
            event = self.push.decode(params)
        except BadResult as exc:
            log.warning("%s", exc)
            return
        self._offer(event)

    async def _subscribe(self) -> None:
        try:
            snapshot = await self._connection.call(self.method, self._params)
        except RpcError as exc:
            log.info("%s failed: %s", self.method.name, exc)
            self._task, self._early = None, []  # nothing will apply what waits
            if self._on_failure is not None:
                self._on_failure(exc)
            return
        self._on_snapshot(snapshot)
        self._seq = snapshot.seq
        early, self._early = self._early, []
        for event in sorted(early, key=lambda e: e.seq):
            self._offer(event)  # after a gap among them the rest wait for the next snapshot

    def _offer(self, event: E) -> None:
        if self._seq is None:
            if self._task is not None:  # only while a snapshot is on its way
                self._early.append(event)
            return
        step = next_event_step(self._seq, event.seq)
        if step is EventStep.APPLY:
            self._seq = event.seq
            self._on_event(event)
        elif step is EventStep.GAP:
            log.info(
                "%s: gap after seq %d (got %d); subscribing again",
                self.method.name,
                self._seq,
                event.seq,
            )
            self.start()
