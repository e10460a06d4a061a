"""The control pipe's client end handed to asyncio: a checked handle becomes a transport the way
asyncio's own pipe connections are made, and a handle is closed whatever fails on the way (a
fake library and a fake proactor; the transport is a socket pair's, so this runs on any OS)."""

from __future__ import annotations

import asyncio
import functools
import socket
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from backend.protocol.endpoint import open_pipe_connection
from backend.protocol.winpipe_client import (
    PipeHeldByAnotherProgram,
    ProactorClientIo,
    connect_user_pipe,
    windows_pipe_handle,
)
from tests.unit.protocol.winpipe_fakes import ADDRESS, PIPE, FakeClientApi


@dataclass
class FakePipe:
    handle: int
    closed: int = 0

    def fileno(self) -> int:
        return self.handle

    def close(self) -> None:
        self.closed += 1


@dataclass
class FakeIo:
    """Wraps handles in ``FakePipe``s; ``make`` builds the transport (or raises)."""

    make: Callable[[asyncio.BaseProtocol], asyncio.BaseTransport]
    wrap_error: OSError | None = None
    pipes: list[FakePipe] = field(default_factory=list)
    transports: list[tuple[FakePipe, str]] = field(default_factory=list)

    def wrap(self, handle: int) -> FakePipe:
        if self.wrap_error is not None:
            raise self.wrap_error
        self.pipes.append(FakePipe(handle))
        return self.pipes[-1]

    def transport(
        self, pipe: Any, protocol: asyncio.BaseProtocol, address: str
    ) -> asyncio.BaseTransport:
        self.transports.append((pipe, address))
        return self.make(protocol)


def failing_transport(protocol: asyncio.BaseProtocol) -> asyncio.BaseTransport:
    raise OSError("no completion port")


async def test_a_checked_pipe_becomes_a_reader_and_a_writer() -> None:
    loop = asyncio.get_running_loop()
    far, near = socket.socketpair()
    make_socket_transport = loop._make_socket_transport  # type: ignore[attr-defined]
    io = FakeIo(lambda protocol: make_socket_transport(near, protocol))
    api = FakeClientApi()
    connect = functools.partial(connect_user_pipe, api=api, io=io, last_error=api.last_error)

    reader, writer = await open_pipe_connection(ADDRESS, connect, limit=64)
    far_reader, far_writer = await asyncio.open_connection(sock=far)
    try:
        writer.write(b"ping\n")
        await writer.drain()
        assert await asyncio.wait_for(far_reader.readline(), 5) == b"ping\n"
        far_writer.write(b"pong\n")
        await far_writer.drain()
        assert await asyncio.wait_for(reader.readline(), 5) == b"pong\n"
        assert [(pipe.handle, address) for pipe, address in io.transports] == [(PIPE, ADDRESS)]
        assert "EqualSid" in api.names() and ("CloseHandle", (PIPE,)) not in api.calls
    finally:
        writer.close()
        far_writer.close()
        await asyncio.gather(writer.wait_closed(), far_writer.wait_closed())


async def test_a_refused_pipe_reaches_no_transport() -> None:
    api = FakeClientApi(same_user=False)
    io = FakeIo(failing_transport)

    with pytest.raises(PipeHeldByAnotherProgram):
        await connect_user_pipe(asyncio.Protocol, ADDRESS, api=api, io=io)
    assert io.pipes == [] and api.calls[-1] == ("CloseHandle", (PIPE,))


async def test_a_handle_that_cannot_be_wrapped_is_closed() -> None:
    api = FakeClientApi()
    io = FakeIo(failing_transport, wrap_error=OSError("not a pipe"))

    with pytest.raises(OSError, match="not a pipe"):
        await connect_user_pipe(asyncio.Protocol, ADDRESS, api=api, io=io)
    assert api.calls[-1] == ("CloseHandle", (PIPE,))


async def test_a_pipe_without_a_transport_is_closed_by_its_wrapper() -> None:
    api = FakeClientApi()
    io = FakeIo(failing_transport)

    with pytest.raises(OSError, match="no completion port"):
        await connect_user_pipe(asyncio.Protocol, ADDRESS, api=api, io=io)
    assert [pipe.closed for pipe in io.pipes] == [1]
    assert ("CloseHandle", (PIPE,)) not in api.calls, "the wrapper owns it, and closes it once"


async def test_a_loop_without_a_proactor_is_refused_before_any_windows_call() -> None:
    api = FakeClientApi()
    if hasattr(asyncio.get_running_loop(), "_proactor"):
        pytest.skip("this loop is a proactor")

    with pytest.raises(OSError, match="proactor event loop"):
        await connect_user_pipe(asyncio.Protocol, ADDRESS, api=api)
    assert api.calls == []


def test_the_proactor_io_makes_asyncios_duplex_pipe_transport() -> None:
    made: list[tuple[Any, ...]] = []
    transport = asyncio.BaseTransport()

    def make(pipe: Any, protocol: Any, extra: dict[str, str]) -> asyncio.BaseTransport:
        made.append((pipe, protocol, extra))
        return transport

    loop = types.SimpleNamespace(_proactor=object(), _make_duplex_pipe_transport=make)
    io = ProactorClientIo(loop, wrap=FakePipe)  # type: ignore[arg-type]
    pipe = io.wrap(PIPE)
    protocol = asyncio.Protocol()

    assert pipe == FakePipe(PIPE)
    assert io.transport(pipe, protocol, ADDRESS) is transport
    assert made == [(pipe, protocol, {"addr": ADDRESS})]


@pytest.mark.skipif(sys.platform == "win32", reason="pipe handles exist on Windows")
def test_pipe_handles_are_windows_only() -> None:
    with pytest.raises(OSError, match="Windows only"):
        windows_pipe_handle(PIPE)
