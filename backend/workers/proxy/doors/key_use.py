"""What LAN API keys did at the front doors: when each was last used, reported to the broker
in batches, and the engines' own paths refused to a key without the admin scope, logged.

A door notes a key's use with a dictionary write per request; the broker hears of it at most
once per ``report_s`` (whatever the number of requests), so ``last_used_at`` is that late at
most and is never a database write per request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping

from backend.core.bad_requests import BadRequestLimiter, peer_name
from backend.protocol.types.apikeys import KEY_USE_REPORT_S, KeysUsed

log = logging.getLogger(__name__)

Report = Callable[[KeysUsed], None]
# Seconds between reports instead of ``KEY_USE_REPORT_S`` (tests that wait for a report).
REPORT_ENV = "PAIR_KEY_USE_REPORT_S"


def _no_report(report: KeysUsed) -> None:
    """Where use goes when no broker listens (a door built without one, in tests)."""


class KeyUseLog:
    """Owns the report timer (one at a time, only while uses wait) and the denials' limiter."""

    def __init__(
        self,
        report: Report = _no_report,
        *,
        report_s: float = KEY_USE_REPORT_S,
        wall: Callable[[], float] = time.time,
        denials: BadRequestLimiter | None = None,
    ) -> None:
        self._report = report
        self._report_s = report_s
        self._wall = wall
        self._used: dict[str, float] = {}
        self._report_due: asyncio.TimerHandle | None = None
        self._denials = denials or BadRequestLimiter()

    def used(self, key_hash: str) -> None:
        """The key whose hash is ``key_hash`` was just admitted."""
        self._used[key_hash] = self._wall()
        if self._report_due is None:
            loop = asyncio.get_running_loop()
            self._report_due = loop.call_later(self._report_s, self.flush)

    def flush(self) -> None:
        """Report every use that waits now (the worker's shutdown does, so none is lost)."""
        if self._report_due is not None:
            self._report_due.cancel()
            self._report_due = None
        used, self._used = self._used, {}
        if used:
            self._report(KeysUsed(used=used))

    def denied(self, key_name: str, source: object, method: str, path: str) -> None:
        """Log that a key without the admin scope asked for an engine's own path: one line,
        at most one a source per 10 s (the lines dropped are counted in the next)."""
        address = peer_name(source)
        dropped = self._denials.admit(address)
        if dropped is None:
            return
        more = f" ({dropped} more refusals not logged)" if dropped else ""
        # The path is the client's: shortened and quoted so it cannot forge log lines.
        log.warning(
            "refused %s %.200r to API key %r from %s: it needs the admin scope%s",
            method,
            path,
            key_name or "(unnamed)",
            address,
            more,
        )


def report_interval(environ: Mapping[str, str]) -> float:
    """Seconds between reports: ``KEY_USE_REPORT_S``, or what ``REPORT_ENV`` says (tests)."""
    try:
        seconds = float(environ.get(REPORT_ENV, KEY_USE_REPORT_S))
    except ValueError:
        return KEY_USE_REPORT_S
    return seconds if seconds > 0 else KEY_USE_REPORT_S
