"""Ports for tests that need "nothing answers there"."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator


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
