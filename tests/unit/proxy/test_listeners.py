"""Listener port selection: the configured port when free, another one otherwise."""

from __future__ import annotations

import socket

from backend.components.proxy.listeners import (
    SO_EXCLUSIVEADDRUSE,
    listen_tcp,
    open_listener,
    port_options,
    port_taken_error_id,
    port_taken_message,
)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_free_port_is_taken_as_configured() -> None:
    port = _free_port()
    door = open_listener("ollama", "127.0.0.1", port)
    with door.sock:
        assert (door.port, door.moved, door.url()) == (port, False, f"http://127.0.0.1:{port}")


def test_a_taken_port_is_left_alone_and_another_is_bound() -> None:
    with listen_tcp("127.0.0.1", 0) as other_program:
        taken = int(other_program.getsockname()[1])
        door = open_listener("openai", "127.0.0.1", taken)
        with door.sock:
            assert door.moved and door.port != taken
            assert port_taken_error_id("openai") == "proxy:port-taken:openai"
            message = port_taken_message(door)
            assert str(taken) in message and door.url() in message


def test_a_port_taken_on_loopback_is_not_shared_by_a_wildcard_listener() -> None:
    with listen_tcp("127.0.0.1", 0) as other_program:
        taken = int(other_program.getsockname()[1])
        door = open_listener("llamacpp", "0.0.0.0", taken)
        with door.sock:
            assert door.moved


def test_a_taken_relay_port_moves_like_a_door_and_the_warning_names_both_ports() -> None:
    with listen_tcp("127.0.0.1", 0) as other_program:
        taken = int(other_program.getsockname()[1])
        relay = open_listener("relay", "127.0.0.1", taken)
        with relay.sock:
            assert relay.moved and relay.url() == f"https://127.0.0.1:{relay.port}"
            assert port_taken_error_id("relay") == "proxy:port-taken:relay"
            message = port_taken_message(relay)
            assert str(taken) in message and str(relay.port) in message
            assert "node-info" in message


def test_listener_options_per_platform() -> None:
    assert port_options("linux") == [socket.SO_REUSEADDR]
    assert port_options("darwin", share_port=True) == [socket.SO_REUSEADDR, socket.SO_REUSEPORT]
    # Windows: SO_REUSEADDR would let another program take the port; exclusive use instead.
    assert port_options("win32") == [SO_EXCLUSIVEADDRUSE]
    assert SO_EXCLUSIVEADDRUSE == ~4  # Windows' value: ~SO_REUSEADDR, its SO_REUSEADDR is 4
