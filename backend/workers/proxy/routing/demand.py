"""What the router saw of demand since its last report: the replica planner's input.

Per model clients asked for at this node's doors: how many requests were admitted, the longest
wait placement expected for one of them before it could start on the node it chose (a slot,
plus a load where the model was not resident), how many wait for their commit now, and which
nodes list it (with its digest where the table gives one). Per model of this node's own
engines: when a request last committed there and how many run now, whoever asked (this node's
doors, or a member through the relay).

The meter is plain data fed by the router (no I/O, no clock of its own: callers pass the
time); ``report`` turns it into a ``DemandReport`` only when something changed since the last
one, so an idle worker sends nothing, and ``until_changed`` lets the reporting loop sleep until
something does. Estimating the wait gathers placement's inputs, so it is
done at most once per model every ``ESTIMATE_EVERY_S``; dispatches between reuse that figure.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from backend.protocol.proxy import DemandReport, LocalUse, ModelDemand, ProxyTargets, RouteTarget
from backend.workers.proxy.routing.naming import normalize, same_model

# How often a model's expected wait is worked out afresh (seconds); the figure in between is
# the last one, so a busy door pays for placement's inputs ten times a second at most.
ESTIMATE_EVERY_S = 0.1
# How often the worker reports (seconds), when anything changed.
REPORT_EVERY_S = 1.0


class _Asked:
    """One requested model's tally since the last report (mutable, owned by ``Demand``)."""

    __slots__ = (
        "digest",
        "estimated_at",
        "last_wait_s",
        "longest_s",
        "owners",
        "queued",
        "requests",
        "table",
    )
    table: ProxyTargets | None

    def __init__(self) -> None:
        self.requests = 0
        self.queued = 0
        self.longest_s = 0.0  # the longest expected wait since the last report
        self.last_wait_s = 0.0
        self.estimated_at = float("-inf")  # monotonic seconds of ``last_wait_s``
        self.owners: list[str] = []
        self.digest: str | None = None
        self.table = None  # the table ``owners`` and ``digest`` were read from


class _Used:
    """One local engine model's use (mutable, owned by ``Demand``)."""

    __slots__ = ("active", "last_used_at")

    def __init__(self) -> None:
        self.active = 0
        self.last_used_at = 0.0


class Demand:
    """The demand meter: requests, waits and queues per model; local engines' use."""

    def __init__(self) -> None:
        self._asked: dict[str, _Asked] = {}
        self._used: dict[tuple[str, str], _Used] = {}
        self._changed = False
        self._waiter: asyncio.Future[None] | None = None  # ``until_changed`` resting

    # Requests at this node's doors.

    def admitted(self, model: str, table: ProxyTargets, found: Sequence[RouteTarget]) -> None:
        """A request for ``model`` was admitted; ``found`` are the nodes that list it now."""
        asked = self._asked.get(model)
        if asked is None:
            asked = self._asked[model] = _Asked()
        asked.requests += 1
        asked.queued += 1
        if asked.table is not table:
            asked.table = table
            asked.owners = sorted({target.node_id for target in found})
            asked.digest = digest_of(model, found)
        self._mark()

    def committed(self, model: str) -> None:
        """A request for ``model`` stopped waiting: it committed, or ended without a commit."""
        asked = self._asked.get(model)
        if asked is not None and asked.queued > 0:
            asked.queued -= 1
            self._mark()

    def reused_wait(self, model: str, now: float) -> bool:
        """Count ``model``'s last worked-out wait for this request too, if it is recent (from
        ``ESTIMATE_EVERY_S`` before ``now``, monotonic); False: work it out (``waited``)."""
        asked = self._asked.get(model)
        if asked is None or now - asked.estimated_at >= ESTIMATE_EVERY_S:
            return False
        if asked.last_wait_s > asked.longest_s:
            asked.longest_s = asked.last_wait_s
            self._mark()
        return True

    def waited(self, model: str, wait_s: float, now: float) -> None:
        """Placement expects the request to wait ``wait_s`` before it starts where it goes."""
        asked = self._asked.get(model)
        if asked is None:
            asked = self._asked[model] = _Asked()
        asked.last_wait_s, asked.estimated_at = wait_s, now
        if wait_s > asked.longest_s:
            asked.longest_s = wait_s
            self._mark()

    # This node's engines.

    def local_started(self, engine: str, model: str, at: float) -> None:
        """A request committed on this node's ``engine`` for ``model`` at ``at`` (Unix time)."""
        used = self._used.get((engine, model))
        if used is None:
            used = self._used[(engine, model)] = _Used()
        used.active += 1
        used.last_used_at = at
        self._mark()

    def local_ended(self, engine: str, model: str) -> None:
        """A request that ``local_started`` ended."""
        used = self._used.get((engine, model))
        if used is not None and used.active > 0:
            used.active -= 1
            self._mark()

    # Reporting.

    def _mark(self) -> None:
        """Something changed since the last report (wakes ``until_changed``)."""
        if not self._changed:
            self._changed = True
            waiter, self._waiter = self._waiter, None
            if waiter is not None and not waiter.done():
                waiter.set_result(None)

    async def until_changed(self) -> None:
        """Return once something changed since the last report (at once if it has)."""
        if self._changed:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiter = waiter
        try:
            await waiter
        finally:
            if self._waiter is waiter:
                self._waiter = None

    def report(self, at: float) -> DemandReport | None:
        """What changed since the last report (None: nothing did); starts the next period."""
        if not self._changed:
            return None
        self._changed = False
        models = [
            ModelDemand(
                model=model,
                digest=asked.digest,
                requests=asked.requests,
                wait_s=round(asked.longest_s, 3),
                queued=asked.queued,
                owners=asked.owners,
            )
            for model, asked in sorted(self._asked.items())
            if asked.requests or asked.queued
        ]
        local = [
            LocalUse(engine=engine, model=model, last_used_at=used.last_used_at, active=used.active)
            for (engine, model), used in sorted(self._used.items())
        ]
        # A model nobody asks for any more is forgotten (its last estimate with it), so names
        # clients try once do not pile up.
        self._asked = {model: asked for model, asked in self._asked.items() if asked.queued}
        for asked in self._asked.values():
            asked.requests, asked.longest_s = 0, 0.0
        return DemandReport(at=at, models=models, local=local)

    def queued(self, model: str) -> int:
        """How many requests for ``model`` wait for their commit now."""
        asked = self._asked.get(model)
        return asked.queued if asked is not None else 0


def digest_of(model: str, found: Sequence[RouteTarget]) -> str | None:
    """The digest of ``model``'s weights as the first of ``found`` that gives one lists it."""
    for target in found:
        digests = target.digests
        if not digests:
            continue
        name = normalize(target.engine, model)
        known = digests.get(model) or digests.get(name)
        if known is None:
            known = next(
                (d for n, d in digests.items() if same_model(target.engine, n, name)), None
            )
        if known is not None:
            return known
    return None
