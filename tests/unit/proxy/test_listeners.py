"""Front door port selection: the configured port when free, another one otherwise."""

from __future__ import annotations

import socket

from backend.components.proxy.listeners import (
    listen_tcp,
    open_front_door,
    port_taken_error_id,
    port_taken_message,
)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_free_port_is_taken_as_configured() -> None:
    port = _free_port()
    door = open_front_door("ollama", "127.0.0.1", port)
    with door.sock:
        assert (door.port, door.moved, door.url()) == (port, False, f"http://127.0.0.1:{port}")


def test_a_taken_port_is_left_alone_and_another_is_bound() -> None:
    with listen_tcp("127.0.0.1", 0) as other_program:
        taken = int(other_program.getsockname()[1])
        door = open_front_door("openai", "127.0.0.1", taken)
        with door.sock:
            assert door.moved and door.port != taken
            assert port_taken_error_id("openai") == "proxy:port-taken:openai"
            message = port_taken_message(door)
            assert str(taken) in message and door.url() in message


def test_a_port_taken_on_loopback_is_not_shared_by_a_wildcard_listener() -> None:
    with listen_tcp("127.0.0.1", 0) as other_program:
        taken = int(other_program.getsockname()[1])
        door = open_front_door("llamacpp", "0.0.0.0", taken)
        with door.sock:
            assert door.moved
