"""What waits at an engine scheduler (a ``Ticket`` per request or exclusive operation), the
set of those it admitted, counted per model, and telling the waiting ones what became of them."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Iterator

import msgspec

from backend.workers.proxy.scheduler.engine_access import LoadFailed

COMPLETION = "completion"

log = logging.getLogger(__name__)


class Ticket(msgspec.Struct, eq=False):
    """One request or exclusive operation at the scheduler; ``slot`` once admitted (pinned)."""

    model: str
    kind: str = COMPLETION
    session: str | None = None
    slot: int | None = None
    admitted: asyncio.Future[None] = msgspec.field(
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


def tell_waiting(tickets: Iterable[Ticket], engine: str) -> None:
    """Call, once, the ``on_wait`` of each ticket a decision pass left queued on ``engine``."""
    for ticket in tickets:
        waiting, ticket.on_wait = ticket.on_wait, None
        if waiting is not None and not ticket.admitted.done():
            try:
                waiting()
            except Exception:  # one caller's trouble must not cost the others theirs
                log.exception("a waiting request's callback failed on %s", engine)


def fail_queued(queue: list[Ticket], model: str, reason: str) -> None:
    """Take ``model``'s requests (not its operations) out of ``queue``, each failed with
    ``LoadFailed(reason)``."""
    for ticket in [t for t in queue if t.model == model and not t.exclusive]:
        queue.remove(ticket)
        if not ticket.admitted.done():
            ticket.admitted.set_exception(LoadFailed(reason))
