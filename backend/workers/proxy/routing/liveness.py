"""A member's answer while it streams: cut when the member is gone, waited for while it lives.

The broker keeps a member in the routing table only while its member link is up (a pinned
session that pings every second). So while a member's answer streams to a client:

- the member leaving the table cuts the stream at once, and the client gets its API's error
  record (never a clean end): the member is gone, nothing more will come;
- the stream may be silent for the table's ``relay_idle_s`` (far shorter than the
  first-content bound); then the link tells a slow engine from a dead member: still in the
  table, the stream waits on up to the first-content bound; not in it, it is cut.

A stream from this computer's engines has no such watch: its idle bound is the first-content
one, as before.
"""

from __future__ import annotations

from collections.abc import Callable

from backend.protocol.proxy import ProxyTargets, RouteTarget
from backend.workers.proxy.routing.departures import Departures
from backend.workers.proxy.upstream.watchdog import Watchdog

_WRITING = "writing"  # the relay's wait for a slow client: the member's liveness is no matter


class PeerStreamWatch:
    """Watches one member's streaming answer (until ``close``); no task, no timer of its own."""

    __slots__ = (
        "_cut",
        "_departures",
        "_entry",
        "_extra_s",
        "_granted",
        "_idle_s",
        "_name",
        "_node",
        "_table",
        "_watchdog",
    )

    def __init__(
        self,
        departures: Departures,
        target: RouteTarget,
        watchdog: Watchdog,
        table: Callable[[], ProxyTargets],
        idle_s: float,
        extra_s: float,
    ) -> None:
        self._departures = departures
        self._node = target.node_id
        self._name = target.name or target.node_id
        self._table = table
        self._idle_s = idle_s  # the relay's idle limit
        self._extra_s = extra_s  # what the link's word adds to it
        self._entry = departures.enter(self._node)
        self._cut = lambda: watchdog.cut_now(
            f"{self._name} left the routing table (its member link is down)"
        )
        self._entry.gone.on_set(self._cut)
        self._watchdog = watchdog
        self._granted = 0.0  # the deadline last granted (a wait that reached it is over)
        watchdog.patience = self._patience

    def close(self) -> None:
        """The stream is over: stop watching."""
        self._entry.gone.off(self._cut)
        self._departures.leave(self._node, self._entry)

    def _patience(self, kind: str, deadline: float) -> float:
        """A later deadline for a wait on a silent member that is still linked, once per
        wait (up to the first-content bound from its start); else 0: cut it."""
        if kind == _WRITING:
            return 0.0
        if deadline == self._granted:
            self._watchdog.why = f"the engine sent nothing for {self._idle_s + self._extra_s:g} s"
            return 0.0
        if linked(self._table(), self._node):
            self._granted = deadline + self._extra_s
            return self._granted
        self._watchdog.why = f"{self._name} sent nothing and its member link is down"
        return 0.0


def linked(table: ProxyTargets, node: str) -> bool:
    """Whether ``table`` routes to ``node`` (a member is in it only while linked)."""
    return any(target.node_id == node for found in table.engines.values() for target in found)


def relay_idle(table: ProxyTargets, target: RouteTarget) -> tuple[float, float]:
    """A stream from ``target``: its idle bound, and what the link's word may add to it."""
    full = table.first_content_timeout_s
    if target.kind != "peer" or not 0 < table.relay_idle_s < full:
        return full, 0.0
    return table.relay_idle_s, full - table.relay_idle_s
