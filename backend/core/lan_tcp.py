"""TCP sockets to other computers on the LAN that notice a dead link in seconds, not minutes.

A link that dies without a FIN or RST (Wi-Fi gone, a route blackholed) leaves a connection that
waits forever: the kernel's keep-alive starts after 2 hours by default, and unacknowledged data
is retried for about 15 minutes. Connections between members (the member link, the relay's
pooled connections) instead probe after ``KEEPALIVE_IDLE_S`` of silence, every
``KEEPALIVE_INTERVAL_S``, and give up after ``KEEPALIVE_PROBES`` unanswered probes; where the
kernel has ``TCP_USER_TIMEOUT`` (Linux), data left unacknowledged for ``UNACKNOWLEDGED_LIMIT_S``
ends the connection too. Loopback connections (this computer's engines) keep the defaults.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

KEEPALIVE_IDLE_S = 2
KEEPALIVE_INTERVAL_S = 1
KEEPALIVE_PROBES = 3
UNACKNOWLEDGED_LIMIT_S = 5
# A TCP handshake across a LAN takes milliseconds; one that has not finished in this long will
# not (the first SYN retransmission alone waits a second).
LAN_CONNECT_TIMEOUT_S = 3.0

AddressInfo = tuple[int, int, int, str, tuple[Any, ...]]


def keep_alive(sock: socket.socket) -> None:
    """Give ``sock`` the LAN's keep-alive and unacknowledged-data bounds (what the OS offers)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    # Linux names the idle time TCP_KEEPIDLE; macOS names it TCP_KEEPALIVE.
    idle = getattr(socket, "TCP_KEEPIDLE", None) or getattr(socket, "TCP_KEEPALIVE", None)
    options = (
        (idle, KEEPALIVE_IDLE_S),
        (getattr(socket, "TCP_KEEPINTVL", None), KEEPALIVE_INTERVAL_S),
        (getattr(socket, "TCP_KEEPCNT", None), KEEPALIVE_PROBES),
        (getattr(socket, "TCP_USER_TIMEOUT", None), UNACKNOWLEDGED_LIMIT_S * 1000),
    )
    for option, value in options:
        if option is not None:
            sock.setsockopt(socket.IPPROTO_TCP, option, value)


def lan_socket(address_info: AddressInfo) -> socket.socket:
    """An aiohttp ``socket_factory``: a new socket for ``address_info``, kept alive as
    ``keep_alive`` says unless it goes to a loopback address."""
    family, kind, protocol, _, address = address_info
    sock = socket.socket(family=family, type=kind, proto=protocol)
    if kind == socket.SOCK_STREAM and not _loopback(address):
        try:
            keep_alive(sock)
        except OSError:
            sock.close()
            raise
    return sock


def _loopback(address: tuple[Any, ...]) -> bool:
    try:
        return ipaddress.ip_address(str(address[0]).split("%", 1)[0]).is_loopback
    except (ValueError, IndexError):
        return False
