"""What waits at an engine scheduler (a ``Ticket`` per request or exclusive operation) and the
set of those it admitted, counted per model."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

COMPLETION = "completion"


@dataclass(eq=False)
class Ticket:
    """One request or exclusive operation at the scheduler; ``slot`` once admitted (pinned)."""

    model: str
    kind: str = COMPLETION
    session: str | None = None
    slot: int | None = None
    admitted: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    # Called once if a decision pass ends with it still queued (it waits for capacity).
    on_wait: Callable[[], None] | None = None

    @property
    def exclusive(self) -> bool:
        """Whether it must run alone on a drained engine."""
        return self.kind != COMPLETION


class RunningSet:
    """The admitted tickets, with a count per model kept as they come and go (asked on every
    admission)."""

    __slots__ = ("_per_model", "_tickets")

    def __init__(self) -> None:
        self._tickets: set[Ticket] = set()
        self._per_model: Counter[str] = Counter()

    def add(self, ticket: Ticket) -> None:
        """``ticket`` runs (again: no change)."""
        if ticket not in self._tickets:
            self._tickets.add(ticket)
            self._per_model[ticket.model] += 1

    def discard(self, ticket: Ticket) -> None:
        """``ticket`` ended (not running: no change)."""
        if ticket in self._tickets:
            self._tickets.remove(ticket)
            self._per_model[ticket.model] -= 1
            if not self._per_model[ticket.model]:
                del self._per_model[ticket.model]

    def count(self, model: str) -> int:
        """How many of ``model``'s run."""
        return self._per_model.get(model, 0)

    def __contains__(self, ticket: object) -> bool:
        return ticket in self._tickets

    def __iter__(self) -> Iterator[Ticket]:
        return iter(self._tickets)

    def __len__(self) -> int:
        return len(self._tickets)
