"""The proxy's listening sockets (the front doors and the relay), created and kept by the broker
across worker restarts.

While the worker restarts, the kernel keeps queueing connections on these sockets (up to the
backlog), so a client waits instead of being refused.
"""

from __future__ import annotations

import errno
import socket
from dataclasses import dataclass
from typing import Literal

from backend.protocol.proxy import Door

BACKLOG = 1024
RELAY: Literal["relay"] = "relay"
ListenerName = Door | Literal["relay"]


@dataclass(frozen=True, slots=True)
class Listener:
    """One open listener: a front door or the relay, the port asked for, and the socket."""

    name: ListenerName
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
        """The loopback URL (the relay speaks mutual TLS only)."""
        scheme = "https" if self.name == RELAY else "http"
        return f"{scheme}://127.0.0.1:{self.port}"


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


def open_listener(name: ListenerName, host: str, port: int) -> Listener:
    """Listen on ``port`` if it is free, otherwise on any free port (never taking one over)."""
    try:
        return Listener(name, port, listen_tcp(host, port))
    except OSError as exc:
        if exc.errno not in (errno.EADDRINUSE, errno.EACCES):
            raise
    return Listener(name, port, listen_tcp(host, 0))


def port_taken_error_id(name: ListenerName) -> str:
    """The warning raised while ``name`` runs on another port than configured."""
    return f"proxy:port-taken:{name}"


def port_taken_message(listener: Listener) -> str:
    """The warning text naming the real URL (or, for the relay, the real port)."""
    if listener.name == RELAY:
        # Peers read the real port from this node's node-info, so routing follows the move;
        # a firewall opened for the configured port does not.
        return (
            f"Port {listener.wanted_port} for the relay between paired computers is used by "
            f"another program; PAIR serves the relay on port {listener.port} instead (paired "
            "computers learn it from node-info; open it in the firewall or free the port)."
        )
    return (
        f"Port {listener.wanted_port} for the {listener.name} front door is used by another "
        f"program; PAIR serves this door on {listener.url()} instead."
    )


def door_port_taken_message(door: ListenerName, port: int, serving: int, error: OSError) -> str:
    """Why a door could not move to ``port``: the door stays where it is (``serving``)."""
    reason = (
        "is used by another program"
        if error.errno == errno.EADDRINUSE
        else "may not be used by PAIR (ports below 1024 need administrator rights)"
        if error.errno == errno.EACCES
        else f"cannot be listened on ({error.strerror or error})"
    )
    return (
        f"Port {port} {reason}; the {door} front door stays on port {serving}. "
        "Choose another port or free this one."
    )


def send_door(channel: socket.socket, listener: Listener) -> None:
    """Hand ``listener``'s socket to the worker over the hand-over channel (``SCM_RIGHTS``),
    with the door's name as the message."""
    socket.send_fds(channel, [listener.name.encode()], [listener.sock.fileno()])
