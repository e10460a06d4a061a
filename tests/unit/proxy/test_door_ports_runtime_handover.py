"""The door hand-over channel: the broker sends a door's listening socket with the door's name;
the worker takes only what it was told to expect."""

from __future__ import annotations

import errno
import socket
from collections.abc import Iterator

import pytest

from backend.components.proxy.listeners import (
    Listener,
    door_port_owned_message,
    door_port_taken_message,
    listen_tcp,
    listener_on,
    send_door,
)
from backend.protocol import errors
from backend.workers.proxy.channels.handover import open_channel, receive_door


@pytest.fixture
def channel() -> Iterator[tuple[socket.socket, socket.socket]]:
    if not hasattr(socket, "AF_UNIX"):
        pytest.skip("no AF_UNIX: Windows hands a door over by proxy:take-listener instead")
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    worker_end = open_channel(theirs.detach())
    assert worker_end is not None
    yield ours, worker_end
    ours.close()
    worker_end.close()


def test_the_worker_receives_the_listening_socket_of_the_door(
    channel: tuple[socket.socket, socket.socket],
) -> None:
    ours, theirs = channel
    listener = Listener("ollama", 0, listen_tcp("127.0.0.1", 0))
    send_door(ours, listener)
    received = receive_door(theirs, "ollama")
    assert received.getsockname() == listener.sock.getsockname()
    assert received.fileno() != listener.sock.fileno(), "the worker's own descriptor"
    received.close()
    listener.sock.close()


def test_nothing_sent_or_another_door_is_refused(
    channel: tuple[socket.socket, socket.socket],
) -> None:
    ours, theirs = channel
    with pytest.raises(errors.InvalidParams, match="no socket was handed over"):
        receive_door(theirs, "ollama")
    listener = Listener("openai", 0, listen_tcp("127.0.0.1", 0))
    send_door(ours, listener)
    with pytest.raises(errors.InvalidParams, match="not the ollama door's"):
        receive_door(theirs, "ollama")
    listener.sock.close()


def test_a_worker_without_a_channel_takes_no_hand_overs() -> None:
    assert open_channel(None) is None


@pytest.mark.parametrize(
    ("code", "says"),
    [
        (errno.EADDRINUSE, "is used by another program"),
        (errno.EACCES, "below 1024 need administrator rights"),
        (errno.EADDRNOTAVAIL, "cannot be listened on"),
    ],
)
def test_a_refused_port_says_why_and_where_the_door_stays(code: int, says: str) -> None:
    message = door_port_taken_message("ollama", 80, 11434, OSError(code, "refused"))
    assert message.startswith("Port 80 ") and says in message
    assert "the ollama front door stays on port 11434" in message


def test_a_port_of_pairs_own_listener_names_it_not_another_program() -> None:
    doors = [Listener("llamacpp", 0, listen_tcp("127.0.0.1", 0))]
    try:
        port = doors[0].port
        assert listener_on(doors, port) == "llamacpp"
        assert listener_on(doors, port + 1 if port < 65535 else port - 1) is None
    finally:
        doors[0].sock.close()
    message = door_port_owned_message("ollama", port, 11434, "llamacpp")
    assert message.startswith(f"Port {port} is used by PAIR's llamacpp front door;")
    assert "the ollama front door stays on port 11434" in message
    assert "PAIR's relay" in door_port_owned_message("ollama", 14321, 11434, "relay")
