"""How many connections a listener that faces the network holds, and for how long.

A peer that opens connections and never finishes a request would otherwise hold them for
aiohttp's defaults (no deadline for a request's head, 3,630 s idle, no cap), until the process
runs out of descriptors and the owner's own requests fail. So each of PAIR's network listeners
(the front doors, the relay, the node API) closes a connection whose first request head is not
complete within ``head_timeout_s``, one idle between requests for ``keepalive_timeout_s``, and
refuses (closes at once) a connection past ``per_peer`` from one address or ``total`` in all.
Loopback peers are never counted or refused: the owner's requests always get a connection.

``PAIR_CONNECTION_LIMITS`` overrides the numbers (tests; ``per_peer=4,total=8,head_s=1,
idle_s=5,exempt=127.0.0.1``): ``exempt`` lists the addresses that are never refused instead of
"every loopback address", so a test can play a stranger from 127.0.0.2.
"""

from __future__ import annotations

import ipaddress
import logging
import math
from collections.abc import Callable, Mapping
from typing import Literal

import msgspec
from msgspec.structs import replace

log = logging.getLogger(__name__)

LIMITS_ENV = "PAIR_CONNECTION_LIMITS"
# Long enough for a client on a slow link to send its headers; a slowloris holds each socket
# this long at most.
HEAD_TIMEOUT_S = 10.0
# Longer than the idle expiry of the pools that reuse these connections (the worker's own,
# 30 s, for the relay; httpx's 5 s): a client drops an idle connection before the server
# does, so it never sends a request on one the server is closing.
KEEPALIVE_TIMEOUT_S = 60.0
# A member relays all of its clients' requests over one address; a LAN app opens a few.
PER_PEER = 128
TOTAL = 1024

Refusal = Literal["per-address", "total"]


def is_loopback(peer: str) -> bool:
    """Whether ``peer`` (an IP address as text) is this computer: 127.0.0.0/8, ::1, or an
    IPv4-mapped loopback address."""
    if peer.startswith("127.") or peer == "::1":
        return True
    if not peer.startswith("::ffff:"):
        return False
    try:
        return ipaddress.ip_address(peer[7:]).is_loopback
    except ValueError:
        return False


class ConnectionLimits(msgspec.Struct, frozen=True):
    """The caps and deadlines of one process's network listeners (see the module)."""

    per_peer: int = PER_PEER
    total: int = TOTAL
    head_timeout_s: float = HEAD_TIMEOUT_S
    keepalive_timeout_s: float = KEEPALIVE_TIMEOUT_S
    exempt: frozenset[str] | None = None  # None: every loopback address

    def is_exempt(self, peer: str) -> bool:
        """Whether ``peer`` is never counted nor refused."""
        return is_loopback(peer) if self.exempt is None else peer in self.exempt


def limits_for(open_files: int | None, environment: Mapping[str, str]) -> ConnectionLimits:
    """The limits for a process allowed ``open_files`` descriptors (None: unknown or none):
    the total cap keeps half of them for the owner's connections, engines and members.
    ``PAIR_CONNECTION_LIMITS`` in ``environment`` overrides any number it names."""
    limits = ConnectionLimits()
    if open_files is not None:
        limits = replace(limits, total=max(16, min(TOTAL, open_files // 2)))
    text = environment.get(LIMITS_ENV, "").strip()
    if not text:
        return limits
    try:
        return _overridden(limits, text)
    except ValueError as exc:
        log.warning("%s=%r is not usable (%s); using the defaults", LIMITS_ENV, text, exc)
        return limits


def _overridden(limits: ConnectionLimits, text: str) -> ConnectionLimits:
    numbers: dict[str, Callable[[str], object]] = {
        "per_peer": _count,
        "total": _count,
        "head_s": _seconds,
        "idle_s": _seconds,
        "exempt": lambda value: frozenset(filter(None, value.split("+"))),
    }
    names = {"head_s": "head_timeout_s", "idle_s": "keepalive_timeout_s"}
    changes: dict[str, object] = {}
    for part in text.split(","):
        key, _, value = part.partition("=")
        key = key.strip()
        if key not in numbers:
            raise ValueError(f"unknown key {key!r}; expected {', '.join(numbers)}")
        changes[names.get(key, key)] = numbers[key](value.strip())
    return replace(limits, **changes)


def _count(value: str) -> int:
    number = int(value)
    if number < 1:
        raise ValueError(f"{value} is not a positive count")
    return number


def _seconds(value: str) -> float:
    seconds = float(value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{value} is not a positive number of seconds")
    return seconds


class ConnectionCounter:
    """The connections held per peer address and in all (exempt peers are not counted); one
    counter may be shared by several listeners, so the caps hold across them."""

    __slots__ = ("_limits", "_per_peer", "_total")

    def __init__(self, limits: ConnectionLimits) -> None:
        self._limits = limits
        self._per_peer: dict[str, int] = {}
        self._total = 0

    @property
    def limits(self) -> ConnectionLimits:
        """The caps counted against."""
        return self._limits

    @property
    def total(self) -> int:
        """The counted connections held now."""
        return self._total

    def admit(self, peer: str) -> Refusal | None:
        """Count a new connection from ``peer`` (a counted peer must be ``release``d once), or
        say which cap refuses it (then nothing is counted)."""
        held = self._per_peer.get(peer, 0)
        if held >= self._limits.per_peer:
            return "per-address"
        if self._total >= self._limits.total:
            return "total"
        self._per_peer[peer] = held + 1
        self._total += 1
        return None

    def release(self, peer: str) -> None:
        """A counted connection from ``peer`` closed."""
        held = self._per_peer.get(peer, 0)
        if held <= 1:
            self._per_peer.pop(peer, None)
        else:
            self._per_peer[peer] = held - 1
        self._total = max(0, self._total - 1)
