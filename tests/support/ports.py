"""Ports for tests: ones to listen on, and ones where nothing answers.

A port handed out by :func:`free_port` is free when it is chosen and is bound later by a child
process, so nothing holds it in between. Two things could take it meanwhile, and both grow with
the load: another test (another pytest-xdist worker, on a machine running several) picking the
same port, and any process's outgoing connection, whose local port the kernel takes from the
ephemeral range. So ports come from below the ephemeral range, and each xdist worker draws from
its own share of that span; a port handed out recently by this process is not handed out again.
"""

from __future__ import annotations

import collections
import contextlib
import os
import random
import socket
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

# PAIR's defaults and the engines' own ports: a test never takes one.
RESERVED_PORTS = frozenset({1234, 1235, 8080, 8081, 11434, 11435, 14320, 14321})

# Below the ephemeral range of Linux (32768-60999), macOS and Windows (49152-65535).
_SPAN = (20000, 32000)
_LINUX_EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
_recent: collections.deque[int] = collections.deque(maxlen=512)


def worker_index(environ: Mapping[str, str] = os.environ) -> tuple[int, int]:
    """This pytest-xdist worker's number and the number of workers: ``(0, 1)`` without xdist."""
    worker = environ.get("PYTEST_XDIST_WORKER", "")
    count = environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not worker.startswith("gw") or not worker[2:].isdigit() or not count.isdigit():
        return 0, 1
    return int(worker[2:]) % max(int(count), 1), max(int(count), 1)


def worker_span(environ: Mapping[str, str] = os.environ) -> tuple[int, int]:
    """This worker's share ``[low, high)`` of the span: all of it without pytest-xdist."""
    low, high = _SPAN
    index, count = worker_index(environ)
    share = (high - low) // count
    return low + index * share, low + (index + 1) * share


def span_clear_of_ephemeral() -> bool:
    """Whether the span is below the ephemeral range here (Linux says; others are known)."""
    if not sys.platform.startswith("linux"):
        return True
    try:
        first = int(_LINUX_EPHEMERAL.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return True
    return first >= _SPAN[1]


def _bindable(port: int) -> bool:
    """Whether a listener could bind ``port`` on every address now (0.0.0.0 covers loopback)."""
    with socket.socket() as probe:
        try:
            probe.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A TCP port nothing listens on right now, never one of the reserved defaults."""
    if span_clear_of_ephemeral():
        low, high = worker_span()
        for _ in range(200):
            port = random.randrange(low, high)
            if port in RESERVED_PORTS or port in _recent or not _bindable(port):
                continue
            _recent.append(port)
            return port
    while True:  # an unusual ephemeral range: let the kernel choose
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        if port not in RESERVED_PORTS:
            return port


@contextlib.contextmanager
def refusing_port() -> Iterator[int]:
    """A loopback port that refuses connections for as long as the ``with`` block runs.

    It is bound and never listened on: no other socket can take it meanwhile (a listener of
    another test or process, or a client's own ephemeral port connecting to itself), which a
    port that was merely free a moment ago cannot promise on a busy machine.
    """
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield held.getsockname()[1]
