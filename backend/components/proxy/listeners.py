"""The proxy's listening sockets (the front doors and the relay), created and kept by the broker
across worker restarts.

While the worker restarts, the kernel keeps queueing connections on these sockets (up to the
backlog), so a client waits instead of being refused.

The doors listen on loopback only while LAN access is off, so no other computer can even hold
a connection to them, and on every address while it is on (``door_host``); the relay (mutual
TLS, for paired computers) always listens on every address. A switch re-binds each door on its
own port while the old socket still listens (``rebind``), so this computer is never refused.
"""

from __future__ import annotations

import contextlib
import errno
import socket
import sys
from collections.abc import Iterable
from typing import Literal

import msgspec

from backend.protocol.proxy import Door

BACKLOG = 1024
RELAY: Literal["relay"] = "relay"
LOOPBACK = "127.0.0.1"
EVERY_ADDRESS = "0.0.0.0"
ListenerName = Door | Literal["relay"]


class Listener(msgspec.Struct, frozen=True):
    """One open listener: a front door or the relay, the port asked for, and the socket."""

    name: ListenerName
    wanted_port: int
    sock: socket.socket

    @property
    def port(self) -> int:
        """The port actually bound."""
        return int(self.sock.getsockname()[1])

    @property
    def host(self) -> str:
        """The address bound (``0.0.0.0``: every address)."""
        return str(self.sock.getsockname()[0])

    @property
    def moved(self) -> bool:
        """Whether the wanted port was taken and another one was bound."""
        return self.port != self.wanted_port

    def url(self) -> str:
        """The loopback URL (the relay speaks mutual TLS only)."""
        scheme = "https" if self.name == RELAY else "http"
        return f"{scheme}://127.0.0.1:{self.port}"


def listen_tcp(host: str, port: int, *, share_port: bool = False) -> socket.socket:
    """A listening TCP socket on ``host:port`` (0 picks a free port); raises ``OSError``.
    ``share_port`` binds with ``SO_REUSEPORT`` (``rebind`` only)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        for option in port_options(sys.platform, share_port=share_port):
            sock.setsockopt(socket.SOL_SOCKET, option, 1)
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except OSError:
        sock.close()
        raise
    return sock


# Windows' own value (``~SO_REUSEADDR``); the socket module names it only there.
SO_EXCLUSIVEADDRUSE: int = getattr(socket, "SO_EXCLUSIVEADDRUSE", -5)


def port_options(platform: str, *, share_port: bool = False) -> list[int]:
    """The ``SOL_SOCKET`` options a door's listener sets before it binds, per platform.

    POSIX: ``SO_REUSEADDR`` lets a restarted broker bind while old connections sit in
    TIME_WAIT, and still refuses a port another program listens on; ``share_port`` adds
    ``SO_REUSEPORT`` (a door moving port). Windows: ``SO_REUSEADDR`` there would let another
    program bind the same port, so ``SO_EXCLUSIVEADDRUSE`` (TIME_WAIT never blocks a bind)."""
    if platform == "win32":
        return [SO_EXCLUSIVEADDRUSE]
    options = [socket.SO_REUSEADDR]
    if share_port:
        options.append(socket.SO_REUSEPORT)
    return options


def door_host(lan_access: bool) -> str:
    """Where the front doors listen: every address while other computers may use them,
    loopback only while they may not."""
    return EVERY_ADDRESS if lan_access else LOOPBACK


def rebind(listener: Listener, host: str) -> Listener:
    """``listener``'s door on the same port at ``host``, opened while the old socket still
    listens; raises ``OSError`` (the old one is left as it was).

    Linux refuses to bind ``0.0.0.0:p`` while ``127.0.0.1:p`` listens (and the reverse) unless
    both sockets allow sharing the port (``SO_REUSEPORT``, same user only). It is allowed for
    this bind alone and taken back at once: a program that does not itself ask to share the
    port, and any other user's, is refused as before.
    """
    share = getattr(socket, "SO_REUSEPORT", None)
    port = listener.port
    if share is None:
        return Listener(listener.name, listener.wanted_port, listen_tcp(host, port))
    listener.sock.setsockopt(socket.SOL_SOCKET, share, 1)
    try:
        sock = listen_tcp(host, port, share_port=True)
    finally:
        with contextlib.suppress(OSError):
            listener.sock.setsockopt(socket.SOL_SOCKET, share, 0)
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, share, 0)
    return Listener(listener.name, listener.wanted_port, sock)


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


def door_port_owned_message(door: ListenerName, port: int, serving: int, owner: str) -> str:
    """Why a door could not move to ``port``: another of PAIR's own listeners (``owner``) is
    on it, so "another program" would send the user looking for the wrong culprit."""
    where = "PAIR's relay" if owner == RELAY else f"PAIR's {owner} front door"
    return (
        f"Port {port} is used by {where}; the {door} front door stays on port {serving}. "
        "Choose another port."
    )


def listener_on(listeners: Iterable[Listener], port: int) -> ListenerName | None:
    """The name of the listener among ``listeners`` serving ``port``, if any."""
    return next((listener.name for listener in listeners if listener.port == port), None)


def send_door(channel: socket.socket, listener: Listener) -> None:
    """Hand ``listener``'s socket to the worker over the hand-over channel (``SCM_RIGHTS``),
    with the door's name as the message."""
    socket.send_fds(channel, [listener.name.encode()], [listener.sock.fileno()])


def lan_bind_message(door: ListenerName, host: str, serving: str, error: OSError) -> str:
    """Why a door could not follow the LAN access setting to ``host``: it stays on ``serving``."""
    where = "every address" if host == EVERY_ADDRESS else "loopback only"
    return (
        f"The {door} front door could not listen on {where} as the lan_access setting asks "
        f"({error.strerror or error}); it still listens on {serving}."
    )
