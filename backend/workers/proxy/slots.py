"""Which requests hold one of this node's engine slots: a first-in-first-out queue per model.

Display only: the request is sent to the engine at once (the engine queues it itself); the
tracker says when it is the engine's turn to work on it, so its job can read Running before
its first output. As many requests per model as the engine has slots run; the rest wait in
arrival order. Output from a waiting request proves it holds a slot, so it is promoted.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(eq=False)
class Ticket:
    """One request's place: ``running`` is set once it holds a slot."""

    model: str
    on_running: Callable[[], None] = lambda: None
    running: asyncio.Event = field(default_factory=asyncio.Event)
    left: bool = False

    def run(self) -> None:
        """It holds a slot now."""
        self.running.set()
        self.on_running()


@dataclass
class _Queue:
    capacity: int
    holding: set[Ticket] = field(default_factory=set)
    waiting: deque[Ticket] = field(default_factory=deque)


class SlotTracker:
    """Per-model queues for one engine; ``capacity`` comes from the engine's slot counts."""

    def __init__(self) -> None:
        self._queues: dict[str, _Queue] = {}

    def enter(
        self, model: str, capacity: int, on_running: Callable[[], None] = lambda: None
    ) -> Ticket:
        """Queue a request for ``model`` (a normalized name); it runs if a slot is free.

        ``on_running`` is called when it gets a slot (at once, inside this call, if one is free).
        """
        queue = self._queues.setdefault(model, _Queue(max(capacity, 1)))
        queue.capacity = max(capacity, 1)
        ticket = Ticket(model, on_running)
        queue.waiting.append(ticket)
        self._promote(queue)
        return ticket

    def output(self, ticket: Ticket) -> None:
        """The engine produced output for ``ticket``: it holds a slot whatever the count says."""
        queue = self._queues.get(ticket.model)
        if queue is None or ticket.left or ticket.running.is_set():
            return
        queue.waiting.remove(ticket)
        queue.holding.add(ticket)
        ticket.run()

    def leave(self, ticket: Ticket) -> None:
        """The request ended (any way): free its slot or its place, and promote the next."""
        if ticket.left:
            return
        ticket.left = True
        queue = self._queues.get(ticket.model)
        if queue is None:
            return
        if ticket in queue.holding:
            queue.holding.discard(ticket)
        else:
            queue.waiting.remove(ticket)
        self._promote(queue)
        if not queue.holding and not queue.waiting:
            del self._queues[ticket.model]

    def pending(self) -> int:
        """Requests at this engine, running or waiting."""
        return sum(len(q.holding) + len(q.waiting) for q in self._queues.values())

    def counts(self, model: str) -> tuple[int, int]:
        """``(running, waiting)`` for ``model``."""
        queue = self._queues.get(model)
        return (len(queue.holding), len(queue.waiting)) if queue else (0, 0)

    @staticmethod
    def _promote(queue: _Queue) -> None:
        while queue.waiting and len(queue.holding) < queue.capacity:
            ticket = queue.waiting.popleft()
            queue.holding.add(ticket)
            ticket.run()
