"""Connections to other computers (the member link, the relay's pooled connections) probe a
silent peer within seconds; this computer's own engines, on loopback, keep the defaults."""

from __future__ import annotations

import socket

import pytest

from backend.core import lan_tcp
from backend.core.lan_tcp import lan_socket


def _option(sock: socket.socket, name: str) -> int | None:
    option = getattr(socket, name, None)
    return None if option is None else sock.getsockopt(socket.IPPROTO_TCP, option)


def test_a_socket_to_another_computer_is_kept_alive_with_lan_bounds() -> None:
    info = (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("192.168.1.20", 11800))
    with lan_socket(info) as sock:
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        if hasattr(socket, "TCP_KEEPIDLE"):
            assert _option(sock, "TCP_KEEPIDLE") == lan_tcp.KEEPALIVE_IDLE_S
        assert _option(sock, "TCP_KEEPINTVL") in (None, lan_tcp.KEEPALIVE_INTERVAL_S)
        assert _option(sock, "TCP_KEEPCNT") in (None, lan_tcp.KEEPALIVE_PROBES)
        limit = _option(sock, "TCP_USER_TIMEOUT")
        assert limit in (None, lan_tcp.UNACKNOWLEDGED_LIMIT_S * 1000)


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_a_socket_to_this_computer_keeps_the_defaults(host: str) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    info = (family, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (host, 11434))
    with lan_socket(info) as sock:
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 0
