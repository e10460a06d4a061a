"""A door re-bound between loopback and every address keeps its port, and the port is not left
open to sharing by another socket afterwards."""

from __future__ import annotations

import errno
import socket

import pytest

from backend.components.proxy.listeners import (
    EVERY_ADDRESS,
    LOOPBACK,
    door_host,
    listen_tcp,
    open_listener,
    rebind,
)


def test_the_doors_listen_on_loopback_until_lan_access_is_on() -> None:
    assert door_host(False) == LOOPBACK == "127.0.0.1"
    assert door_host(True) == EVERY_ADDRESS == "0.0.0.0"


@pytest.mark.parametrize(("start", "to"), [(LOOPBACK, EVERY_ADDRESS), (EVERY_ADDRESS, LOOPBACK)])
def test_a_rebind_keeps_the_port_while_the_old_socket_still_listens(start: str, to: str) -> None:
    old = open_listener("ollama", start, 0)
    new = rebind(old, to)
    try:
        assert (new.host, new.port, new.name) == (to, old.port, "ollama")
        with socket.create_connection(("127.0.0.1", old.port), timeout=2):
            pass  # loopback is served by one of them throughout
        # Nobody else may bind the port: neither socket is left shared.
        for host in (LOOPBACK, EVERY_ADDRESS):
            with pytest.raises(OSError, match="in use") as taken:
                listen_tcp(host, old.port)
            assert taken.value.errno == errno.EADDRINUSE
    finally:
        old.sock.close()
        new.sock.close()
