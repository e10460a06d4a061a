"""Late binding: a request waiting in this node's queue moves to an owner that frees up.

Placement puts each request where it is expected to finish first, once, when it arrives
(docs/PLACEMENT.md). A request that then waits in this node's engine queue would stay there
even when another copy of its model becomes free: a replica the planner loaded, a member whose
own work ended, a cold member that finished loading. So whenever the routing table changes, an
attempt at another node ends, or every ``TICK_S`` while requests wait, the waiting front-door
requests of each model are weighed again, the newest first (they have the most to gain): one
moves when another owner would finish it at least ``MIN_GAIN_S`` and ``MIN_GAIN_SHARE`` of its
time sooner than its place in this queue would, by placement's own estimate (``pair``). Each
move counts against the node it goes to for the next, so a freed node takes what it can serve
soonest and no more; the rest stay in order here.

Never moved: a request pinned to its targets, one a member relayed here (a second hop), one
that moved already. A moved request leaves the queue at once (its caller's wait is cut, as a
departure cuts it, ``departures.py``) and is dispatched to the chosen node as its next attempt;
the move costs it no dispatch of its budget.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from backend.protocol.proxy import ProxyTargets, RouteTarget
from backend.workers.proxy.routing.admission import Admission
from backend.workers.proxy.routing.placement import pair
from backend.workers.proxy.routing.placement.inputs import Candidate, NodeId
from backend.workers.proxy.scheduler.engine_scheduler import EngineScheduler, Ticket

log = logging.getLogger(__name__)

TICK_S = 0.5
MIN_GAIN_S = 1.0
MIN_GAIN_SHARE = 0.25


class Moved(msgspec.Struct, frozen=True):
    """An attempt whose request left this node's queue for ``node`` (not a failure)."""

    node: NodeId


class Waiter(msgspec.Struct, frozen=True):
    """One waiting request: its key, and how many jobs run or wait before it here."""

    key: int
    ahead: int


def plan_moves(
    waiters: Sequence[Waiter],
    here: Candidate,
    others: Sequence[Candidate],
    answer_tokens: float,
) -> list[tuple[int, NodeId]]:
    """Which waiters move where: the newest first, each while another owner would finish it
    clearly sooner than its place here (``MIN_GAIN_S`` and ``MIN_GAIN_SHARE``), every move
    counting as one more job at the node it goes to. ``here`` is this node's candidate
    (its pace, slots); its queue is each waiter's own ``ahead``."""
    if not waiters or not others:
        return []
    extra: dict[NodeId, int] = {}
    moves: list[tuple[int, NodeId]] = []
    for waiter in sorted(waiters, key=lambda w: (-w.ahead, -w.key)):
        mine = msgspec.structs.replace(here, pending=waiter.ahead, reserved=0, affinity=False)
        pool = [mine]
        for other in others:
            added = extra.get(other.node, 0)
            pool.append(
                msgspec.structs.replace(other, reserved=other.reserved + added) if added else other
            )
        ranked = pair.estimates(pool, answer_tokens)
        stay = ranked[0].total_s
        best = min(ranked[1:], key=lambda e: e.total_s)
        if stay - best.total_s < max(MIN_GAIN_S, MIN_GAIN_SHARE * stay):
            break  # the older waiters have less ahead of them: they gain less still
        moves.append((waiter.key, best.node))
        extra[best.node] = extra.get(best.node, 0) + 1
    return moves


class _Entry:
    """One front-door request waiting in this node's queue, while it may still move."""

    __slots__ = ("admission", "cut", "done", "engine", "key", "moved_to", "task", "ticket")

    def __init__(
        self, key: int, admission: Admission, engine: str, task: asyncio.Task[Any]
    ) -> None:
        self.key = key
        self.admission = admission
        self.engine = engine
        self.task = task
        self.ticket: Ticket | None = None
        self.moved_to: NodeId | None = None
        self.cut = False
        self.done = False

    def made(self, ticket: Ticket) -> None:
        """The scheduler queued the request as ``ticket``."""
        self.ticket = ticket

    def interrupt(self) -> None:
        """Cut the request's wait (it then leaves the queue), unless it ended already."""
        if not self.done:
            self.cut = True
            self.task.cancel()


Inputs = Callable[[Admission, list[RouteTarget]], list[Candidate]]


class Waiting:
    """The movable requests waiting here, and the passes that move them (``plan_moves``).

    ``table`` gives the current routing table, ``owners`` a request's candidates in it,
    ``inputs`` placement's view of targets for a request, ``answer_tokens`` a model's mean
    answer length, ``scheduler`` this node's scheduler of an engine. Moves not yet
    dispatched (``landed``) count against their node in later passes."""

    def __init__(
        self,
        *,
        table: Callable[[], ProxyTargets],
        owners: Callable[[Admission], list[RouteTarget]],
        inputs: Inputs,
        answer_tokens: Callable[[str], float],
        scheduler: Callable[[str], EngineScheduler],
    ) -> None:
        self._table = table
        self._owners = owners
        self._inputs = inputs
        self._answer_tokens = answer_tokens
        self._scheduler = scheduler
        self._entries: dict[int, _Entry] = {}
        self._next = 0
        self._transit: dict[NodeId, int] = {}
        self._soon: asyncio.Handle | None = None
        self._tick: asyncio.TimerHandle | None = None

    def enter(self, admission: Admission, engine: str) -> _Entry | None:
        """Register a request about to wait for ``engine`` (None when it may not move)."""
        if admission.origin is not None or admission.only is not None or admission.moved:
            return None
        task = asyncio.current_task()
        if task is None:
            return None
        self._next += 1
        entry = _Entry(self._next, admission, engine, task)
        self._entries[entry.key] = entry
        self._arm()
        return entry

    def leave(self, entry: _Entry) -> Moved | None:
        """The request's wait ended; ``Moved`` when a pass cut it to move it."""
        entry.done = True
        self._entries.pop(entry.key, None)
        if entry.moved_to is None:
            return None
        if entry.cut:
            return Moved(entry.moved_to)
        self.landed(entry.moved_to)  # admitted here before the cut: it stays
        return None

    def landed(self, node: NodeId) -> None:
        """A moved request was dispatched (its reservation counts for it now)."""
        count = self._transit.get(node, 0)
        if count > 1:
            self._transit[node] = count - 1
        else:
            self._transit.pop(node, None)

    def soon(self) -> None:
        """Weigh the waiting requests again on the next loop turn (calls collapse)."""
        if self._entries and self._soon is None:
            self._soon = asyncio.get_running_loop().call_soon(self._pass)

    def close(self) -> None:
        """Stop the timers (the worker is ending)."""
        for handle in (self._soon, self._tick):
            if handle is not None:
                handle.cancel()
        self._soon = self._tick = None

    def _arm(self) -> None:
        if self._tick is None:
            self._tick = asyncio.get_running_loop().call_later(TICK_S, self._ticked)

    def _ticked(self) -> None:
        self._tick = None
        if self._entries:
            self._pass()
            self._arm()

    def _pass(self) -> None:
        self._soon = None
        try:
            self._move_all()
        except Exception:  # a pass that fails leaves every request where it waits
            log.exception("weighing the waiting requests failed")

    def _move_all(self) -> None:
        groups: dict[tuple[str, str, str], list[_Entry]] = {}
        for entry in self._entries.values():
            if entry.ticket is not None and entry.moved_to is None:
                key = (entry.engine, entry.admission.model, entry.admission.dialect)
                groups.setdefault(key, []).append(entry)
        here = self._table().node_id
        for (engine, _, _), entries in groups.items():
            found = self._owners(entries[0].admission)
            local = [t for t in found if t.node_id == here and t.engine == engine]
            others = [t for t in found if t.node_id != here]
            if not local or not others:
                continue
            self._move(engine, entries, local[0], others)

    def _move(
        self, engine: str, entries: list[_Entry], local: RouteTarget, others: list[RouteTarget]
    ) -> None:
        scheduler = self._scheduler(engine)
        waiters: list[Waiter] = []
        for entry in entries:
            ahead = scheduler.ahead(entry.ticket) if entry.ticket is not None else None
            if ahead is not None:
                waiters.append(Waiter(entry.key, ahead))
        if not waiters:
            return
        admission = entries[0].admission
        inputs = self._inputs(admission, [local, *others])
        transit = self._transit
        pool = [
            msgspec.structs.replace(c, reserved=c.reserved + transit[c.node])
            if c.node in transit
            else c
            for c in inputs[1:]
        ]
        answer = self._answer_tokens(admission.model)
        loop = asyncio.get_running_loop()
        moves = plan_moves(waiters, inputs[0], pool, answer)
        # Cut oldest first, so the moved requests reach their node in the order they came.
        for key, node in sorted(moves):
            entry = self._entries[key]
            entry.moved_to = node
            transit[node] = transit.get(node, 0) + 1
            loop.call_soon(entry.interrupt)
