"""The front doors' listening sockets, created and kept by the broker across worker restarts.

While the worker restarts, the kernel keeps queueing connections on these sockets (up to the
backlog), so a client waits instead of being refused.
"""

from __future__ import annotations

import errno
import socket
from dataclasses import dataclass

from backend.protocol.proxy import Door

BACKLOG = 1024


@dataclass(frozen=True, slots=True)
class FrontDoor:
    """One open listener: which door, the port asked for, and the socket."""

    door: Door
    wanted_port: int
    sock: socket.socket

    @property
    def port(self) -> int:
        """The port actually bound."""
        return int(self.sock.getsockname()[1])

    @property
    def moved(self) -> bool:
        """Whether the wanted port was taken and another one was bound."""
        return self.port != self.wanted_port

    def url(self) -> str:
        """The loopback URL clients use."""
        return f"http://127.0.0.1:{self.port}"


def listen_tcp(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (0 picks a free port); raises ``OSError``."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        # Lets a restarted broker bind while old connections sit in TIME_WAIT; on Linux this
        # still refuses a port that another program listens on.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except OSError:
        sock.close()
        raise
    return sock


def open_front_door(door: Door, host: str, port: int) -> FrontDoor:
    """Listen on ``port`` if it is free, otherwise on any free port (never taking one over)."""
    try:
        return FrontDoor(door, port, listen_tcp(host, port))
    except OSError as exc:
        if exc.errno not in (errno.EADDRINUSE, errno.EACCES):
            raise
    return FrontDoor(door, port, listen_tcp(host, 0))


def port_taken_error_id(door: Door) -> str:
    """The warning raised while ``door`` runs on another port than configured."""
    return f"proxy:port-taken:{door}"


def port_taken_message(front_door: FrontDoor) -> str:
    """The warning text naming the real URL."""
    return (
        f"Port {front_door.wanted_port} for the {front_door.door} front door is used by another "
        f"program; PAIR serves this door on {front_door.url()} instead."
    )
