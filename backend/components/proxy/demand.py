"""The proxy worker's demand reports as the broker takes them (``proxy:demand``).

Each report goes to whoever plans replicas (a callback the composition root passes in). The
local engines' use is kept too, for whoever asks when an engine's model last ran: a worker
lists every local model it ran, so its report replaces what an earlier one said of the same
model; a model a restarted worker has not run yet keeps its last use, no longer active.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import msgspec

from backend.protocol.errors import BadResult
from backend.protocol.proxy import DemandReport, LocalUse
from backend.protocol.worker_methods import PROXY_DEMAND

log = logging.getLogger(__name__)


class DemandInbox:
    """Decodes the worker's demand reports, hands each on, and keeps the local engines' use."""

    def __init__(self, on_demand: Callable[[DemandReport], None] | None = None) -> None:
        self._on_demand = on_demand
        self._local: dict[tuple[str, str], LocalUse] = {}

    def received(self, params: Any) -> None:
        """A ``proxy:demand`` push arrived; a malformed one is logged and dropped."""
        try:
            report = PROXY_DEMAND.decode(params)
        except BadResult as exc:
            log.error("ignoring a malformed demand report: %s", exc)
            return
        self._local = merged(self._local, report.local)
        if self._on_demand is not None:
            self._on_demand(report)

    def bind(self, on_demand: Callable[[DemandReport], None]) -> None:
        """Hand every later report to ``on_demand``."""
        self._on_demand = on_demand

    def last_local_use(self) -> list[LocalUse]:
        """Each local engine model's last use, as the worker last reported it."""
        return list(self._local.values())

    def worker_gone(self) -> None:
        """The worker ended: nothing runs on its engines through it any more."""
        self._local = merged(self._local, [])


def merged(
    known: dict[tuple[str, str], LocalUse], reported: list[LocalUse]
) -> dict[tuple[str, str], LocalUse]:
    """``known`` updated by a report: each reported model as reported, the others kept with
    nothing active (the reporting worker does not run them)."""
    result = {
        key: use if use.active == 0 else msgspec.structs.replace(use, active=0)
        for key, use in known.items()
    }
    for use in reported:
        result[(use.engine, use.model)] = use
    return dict(sorted(result.items()))
