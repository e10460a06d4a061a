"""The worker's end of the door hand-over channel: a Unix socket on which the broker sends a
front door's new listening socket (``SCM_RIGHTS``) when its port is changed at run time."""

from __future__ import annotations

import socket

from backend.protocol import errors
from backend.protocol.proxy import Door

# A message is the door's name; longer ones are not the broker's.
MAX_MESSAGE = 64


def open_channel(fd: int | None) -> socket.socket | None:
    """The channel inherited as ``fd`` (None: this worker takes no hand-overs), non-blocking."""
    if fd is None:
        return None
    channel = socket.socket(fileno=fd)
    channel.setblocking(False)
    return channel


def receive_door(channel: socket.socket, door: Door) -> socket.socket:
    """The listening socket the broker sent for ``door`` before it asked us to adopt it.

    The broker writes the descriptor before its ``proxy:adopt-door`` request, so it is
    already waiting here; anything else is refused (and any descriptor that came closed).
    """
    try:
        message, fds, _, _ = socket.recv_fds(channel, MAX_MESSAGE, 1)
    except BlockingIOError:
        raise errors.InvalidParams(f"no socket was handed over for the {door} door") from None
    if len(fds) != 1 or message != door.encode():
        for fd in fds:
            socket.socket(fileno=fd).close()
        raise errors.InvalidParams(f"the socket handed over is not the {door} door's")
    return socket.socket(fileno=fds[0])
