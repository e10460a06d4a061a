"""The worker's end of listeners shared over RPC (Windows' way): the bytes are decoded and
rebuilt by the injected ``fromshare``, a worker started with ``--shared`` names serves no door
before each has arrived, and what is not expected is refused. On Windows the real
``socket.share`` (with this process's PID) and ``socket.fromshare`` run; elsewhere a stand-in
whose bytes name a duplicate descriptor made here, as ``socket.share`` makes one in the
worker."""

from __future__ import annotations

import asyncio
import base64
import os
import socket
import sys
from collections.abc import Iterator

import pytest

from backend.components.proxy.listeners import listen_tcp
from backend.core.guarded_site import ConnectionGuard
from backend.protocol import errors
from backend.workers.proxy.__main__ import parse_shared
from backend.workers.proxy.channels.listeners import ServedListeners
from backend.workers.proxy.channels.shared import (
    AwaitedListeners,
    shared_socket,
    system_fromshare,
)

WINDOWS = sys.platform == "win32"


def stand_in_fromshare(data: bytes) -> socket.socket:
    """Rebuild the socket behind a descriptor number (what ``share_of`` encodes off Windows)."""
    return socket.socket(fileno=int(data))


fromshare = system_fromshare if WINDOWS else stand_in_fromshare


def share_of(sock: socket.socket) -> str:
    """``sock`` shared with this process, base64 as on the wire."""
    if sys.platform == "win32":
        data = sock.share(os.getpid())
    else:
        data = str(os.dup(sock.fileno())).encode()
    return base64.b64encode(data).decode()


def closed(fd: int) -> bool:
    """Whether ``fd`` is closed (nothing opens one in between in these tests)."""
    try:
        sock = socket.socket(fileno=fd)
    except OSError:
        return True
    sock.detach()
    return False


def no_guard(listener: str) -> ConnectionGuard:
    raise AssertionError("no site starts in these tests")


@pytest.fixture
def sockets() -> Iterator[list[socket.socket]]:
    opened = [listen_tcp("127.0.0.1", 0) for _ in range(3)]
    yield opened
    for sock in opened:
        sock.close()


def port(sock: socket.socket) -> int:
    return int(sock.getsockname()[1])


def served(names: list[str], *, closing: bool = False) -> ServedListeners:
    return ServedListeners(
        {},
        guard=no_guard,
        closing=lambda: closing,
        shared=parse_shared(names),
        fromshare=fromshare,
    )


def test_the_bytes_are_base64_of_what_fromshare_rebuilds(sockets: list[socket.socket]) -> None:
    rebuilt = shared_socket(share_of(sockets[0]), fromshare)
    assert rebuilt.getsockname() == sockets[0].getsockname()
    assert rebuilt.fileno() != sockets[0].fileno()
    rebuilt.close()


def test_bytes_that_are_not_base64_or_not_a_socket_are_invalid_params() -> None:
    with pytest.raises(errors.InvalidParams, match="not base64"):
        shared_socket("not base64!", fromshare)

    def refused(data: bytes) -> socket.socket:
        raise OSError(10022, "WSAEINVAL")

    with pytest.raises(errors.InvalidParams, match="could not be rebuilt"):
        shared_socket(base64.b64encode(b"junk").decode(), refused)


async def test_the_set_is_complete_only_once_every_awaited_listener_arrived() -> None:
    awaited = AwaitedListeners(["ollama", "relay"])
    assert awaited.awaited("ollama") and awaited.awaited("relay")
    awaited.arrived("ollama")
    waiting = asyncio.ensure_future(awaited.wait_complete())
    await asyncio.sleep(0)
    assert not waiting.done() and not awaited.awaited("ollama")
    awaited.arrived("relay")
    await asyncio.wait_for(waiting, 1)


async def test_a_worker_started_with_its_descriptors_awaits_nothing() -> None:
    await asyncio.wait_for(AwaitedListeners([]).wait_complete(), 1)


async def test_shared_listeners_fill_the_doors_and_the_relay(
    sockets: list[socket.socket],
) -> None:
    listeners = served(["ollama", "openai", "relay"])
    complete = asyncio.ensure_future(listeners.wait_complete())
    answers = []
    for name, sock in zip(["ollama", "relay", "openai"], sockets, strict=True):
        answers.append(await listeners.take_listener({"listener": name, "shared": share_of(sock)}))
    await asyncio.wait_for(complete, 1)

    assert answers == [
        {"listener": "ollama", "port": port(sockets[0])},
        {"listener": "relay", "port": port(sockets[1])},
        {"listener": "openai", "port": port(sockets[2])},
    ]
    assert listeners.relay_fd is not None
    held = {name: socket.socket(fileno=fd) for name, fd in listeners.fds.items()}
    held["relay"] = socket.socket(fileno=listeners.relay_fd)
    names = {name: sock.getsockname() for name, sock in held.items()}
    assert names == {
        "ollama": sockets[0].getsockname(),
        "relay": sockets[1].getsockname(),
        "openai": sockets[2].getsockname(),
    }
    for sock in held.values():
        sock.close()


async def test_a_door_shared_again_before_it_serves_replaces_its_socket(
    sockets: list[socket.socket],
) -> None:
    listeners = served(["ollama"])
    await listeners.take_listener({"listener": "ollama", "shared": share_of(sockets[0])})
    first = listeners.fds["ollama"]
    answer = await listeners.take_listener({"listener": "ollama", "shared": share_of(sockets[1])})

    assert answer == {"listener": "ollama", "port": port(sockets[1])}
    assert closed(first), "the replaced socket was closed"
    sock = socket.socket(fileno=listeners.fds["ollama"])
    assert sock.getsockname() == sockets[1].getsockname()
    sock.close()


async def test_what_this_worker_does_not_serve_is_refused_and_closed(
    sockets: list[socket.socket],
) -> None:
    listeners = served(["ollama", "relay"])
    await listeners.take_listener({"listener": "relay", "shared": share_of(sockets[0])})
    for name in ("relay", "llamacpp"):
        shared = share_of(sockets[1])
        with pytest.raises(errors.InvalidParams):
            await listeners.take_listener({"listener": name, "shared": shared})
        if not WINDOWS:  # the duplicate's number is known here only
            assert closed(int(base64.b64decode(shared)))
    with pytest.raises(errors.InvalidParams):
        await listeners.take_listener({"listener": "the moon", "shared": "MA=="})
    assert listeners.fds == {}
    assert listeners.relay_fd is not None
    socket.socket(fileno=listeners.relay_fd).close()


async def test_a_worker_whose_listeners_were_closed_takes_none(
    sockets: list[socket.socket],
) -> None:
    listeners = served(["ollama"], closing=True)
    with pytest.raises(errors.Unavailable):
        await listeners.take_listener({"listener": "ollama", "shared": share_of(sockets[0])})


def test_shared_names_are_doors_or_the_relay() -> None:
    assert parse_shared(["ollama", "relay", "llamacpp"]) == ["ollama", "relay", "llamacpp"]
    with pytest.raises(ValueError, match="got 'ssh'"):
        parse_shared(["ssh"])


@pytest.mark.skipif(sys.platform == "win32", reason="the real fromshare runs there")
def test_the_real_fromshare_is_refused_off_windows() -> None:
    with pytest.raises(OSError, match="Windows only"):
        system_fromshare(b"")


@pytest.mark.skipif(not WINDOWS, reason="socket.share is Windows only")
def test_the_real_share_and_fromshare_rebuild_the_listener(sockets: list[socket.socket]) -> None:
    rebuilt = shared_socket(share_of(sockets[0]), system_fromshare)
    assert rebuilt.getsockname() == sockets[0].getsockname()
    rebuilt.close()
