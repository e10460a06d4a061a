"""Which incoming invites a node takes at all: the join window, the rate per address, the cap.

Anyone on the network can send an invite, so a node takes one only while its user has asked
to join a cluster (a window of a few minutes, like Matter's commissioning window or Bluetooth's
pairing mode); every other invite is answered ``not-accepting`` and shown to nobody. While the
window is open, each address may offer a few invites a minute, and at most ``MAX_HELD``
invites are held, ended ones being dropped first. Plain functions over plain data: the caller
keeps the state.
"""

from __future__ import annotations

from collections.abc import Mapping

from backend.protocol.types.cluster import JoinWindow

DEFAULT_WINDOW_MINUTES = 10.0
MAX_WINDOW_MINUTES = 15.0  # Matter's longest commissioning window
MAX_HELD = 16
OFFERS_PER_SOURCE = 6
SOURCE_PERIOD_S = 60.0
MAX_SOURCES = 256
ENDED_KEEP_S = 60.0  # an ended invite stays this long, so screens can show how it ended

NOT_ACCEPTING = (
    "that computer is not accepting invites: on it, choose “Join a cluster…” on the Cluster "
    "page (or run `pair join`), then invite it again"
)
TOO_MANY_FROM_SOURCE = "too many invites from this address; try again in a minute"
TOO_MANY_HELD = "that computer holds too many open invites; try again in a few minutes"


def open_window(now: float, minutes: float) -> JoinWindow:
    """A join window from ``now`` for ``minutes`` (1 to 15); ``ValueError`` otherwise."""
    if not 1.0 <= minutes <= MAX_WINDOW_MINUTES:
        raise ValueError(f"a join window lasts 1 to {MAX_WINDOW_MINUTES:g} minutes")
    return JoinWindow(opened_at=now, closes_at=now + minutes * 60.0)


def is_open(window: JoinWindow | None, now: float) -> bool:
    """Whether ``window`` accepts invites at ``now``."""
    return window is not None and window.opened_at <= now < window.closes_at


def admitted(recent: tuple[float, ...], now: float) -> tuple[float, ...] | None:
    """The source's offer times with one more at ``now``, or None when it is over its rate."""
    kept = tuple(t for t in recent if now - t < SOURCE_PERIOD_S)
    if len(kept) >= OFFERS_PER_SOURCE:
        return None
    return (*kept, now)


def pruned_sources(
    sources: Mapping[str, tuple[float, ...]], now: float
) -> dict[str, tuple[float, ...]]:
    """``sources`` without the addresses quiet for a period, and at most ``MAX_SOURCES`` left."""
    live = {a: times for a, times in sources.items() if times and now - times[-1] < SOURCE_PERIOD_S}
    newest = sorted(live.items(), key=lambda item: item[1][-1], reverse=True)
    return dict(newest[:MAX_SOURCES])
