"""The user-only pipe server's accept logic, against a fake proactor and fake instances (runs on
any OS): the name is always held, clients that leave early are skipped, close leaves nothing."""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass, field
from typing import Any

import pytest

from backend.core.winpipe import PipeNameTaken
from backend.core.winpipe_server import (
    ProactorPipeIo,
    UserPipeServer,
    start_user_pipe_server,
    windows_pipe_handle,
)


@dataclass
class FakePipe:
    handle: int
    events: list[str] = field(repr=False)
    closed: int = 0

    def fileno(self) -> int:
        return self.handle

    def close(self) -> None:
        self.closed += 1
        self.events.append(f"close {self.handle}")


@dataclass
class Rig:
    """Fake instances and a fake proactor sharing one log of what happened, in order."""

    events: list[str] = field(default_factory=list)
    accepts: list[asyncio.Future[Any]] = field(default_factory=list)
    served: list[tuple[FakePipe, asyncio.BaseProtocol]] = field(default_factory=list)
    pipes: list[FakePipe] = field(default_factory=list)
    accept_errors: list[OSError] = field(default_factory=list)
    create_errors: list[OSError] = field(default_factory=list)
    created: int = 0

    def create(self, *, first: bool) -> int:
        if self.create_errors:
            raise self.create_errors.pop(0)
        handle = 100 + self.created
        self.created += 1
        self.events.append(f"create {handle}{' first' if first else ''}")
        return handle

    def wrap(self, handle: int) -> FakePipe:
        pipe = FakePipe(handle, self.events)
        self.pipes.append(pipe)
        return pipe

    def accept(self, pipe: Any) -> asyncio.Future[Any]:
        self.events.append(f"accept {pipe.handle}")
        if self.accept_errors:
            raise self.accept_errors.pop(0)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.accepts.append(future)
        return future

    def serve(self, pipe: Any, protocol: asyncio.BaseProtocol) -> None:
        self.events.append(f"serve {pipe.handle}")
        self.served.append((pipe, protocol))


def server(rig: Rig, retry_s: float = 0.0) -> UserPipeServer:
    return UserPipeServer(rig, rig, asyncio.Protocol, asyncio.get_running_loop(), retry_s=retry_s)


async def settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def test_a_client_is_served_after_the_next_instance_holds_the_name() -> None:
    rig = Rig()
    pipes = server(rig)
    pipes.start()
    assert rig.events == ["create 100 first", "accept 100"]

    rig.accepts[0].set_result(rig.pipes[0])
    await settle()

    assert rig.events[2:] == ["create 101", "accept 101", "serve 100"]
    assert [pipe.handle for pipe, _ in rig.served] == [100]
    assert isinstance(rig.served[0][1], asyncio.Protocol)
    assert rig.pipes[0].closed == 0, "the connected instance is the transport's now"
    pipes.close()


async def test_a_client_that_left_before_the_accept_is_skipped() -> None:
    rig = Rig()
    pipes = server(rig)
    pipes.start()

    rig.accepts[0].set_exception(BrokenPipeError(232, "The pipe is being closed"))
    await settle()

    assert rig.events[2:] == ["close 100", "create 101", "accept 101"]
    assert rig.served == [] and pipes.is_serving()
    pipes.close()


async def test_an_accept_that_fails_at_once_is_retried_on_a_new_instance() -> None:
    rig = Rig(accept_errors=[BrokenPipeError(232, "The pipe is being closed")])
    pipes = server(rig)
    pipes.start()
    await settle()

    assert rig.events == ["create 100 first", "accept 100", "close 100", "create 101", "accept 101"]
    pipes.close()


async def test_no_new_instance_waits_for_the_retry_and_close_cancels_it() -> None:
    rig = Rig()
    pipes = server(rig, retry_s=3600)
    pipes.start()
    rig.create_errors.append(OSError(231, "All pipe instances are busy"))
    rig.accepts[0].set_result(None)
    await settle()

    assert rig.events[2:] == ["serve 100"], "the connected client is served all the same"
    assert pipes._retry is not None and not pipes._retry.cancelled()
    retry = pipes._retry
    pipes.close()
    assert retry.cancelled()


async def test_close_cancels_the_accept_and_closes_the_free_instance_once() -> None:
    rig = Rig()
    pipes = server(rig)
    pipes.start()
    accept = rig.accepts[0]

    pipes.close()
    pipes.close()
    await settle()

    assert accept.cancelled() and not pipes.is_serving()
    assert rig.pipes[0].closed == 1
    assert rig.events == ["create 100 first", "accept 100", "close 100"]


async def test_a_client_connecting_as_the_server_closes_is_not_served() -> None:
    rig = Rig()
    pipes = server(rig)
    pipes.start()
    rig.accepts[0].set_result(None)  # connected; the callback has not run yet
    pipes.close()
    await settle()

    assert rig.served == [] and rig.pipes[0].closed == 1
    assert rig.events == ["create 100 first", "accept 100", "close 100"], "no new instance"


async def test_a_name_already_taken_fails_the_start() -> None:
    rig = Rig(create_errors=[PipeNameTaken(5, "another program holds the pipe")])

    with pytest.raises(PipeNameTaken):
        await start_user_pipe_server("\\\\.\\pipe\\x", asyncio.Protocol, factory=rig, io=rig)
    assert rig.events == []


async def test_start_serves_with_the_given_parts() -> None:
    rig = Rig()
    pipes = await start_user_pipe_server("\\\\.\\pipe\\x", asyncio.Protocol, factory=rig, io=rig)

    assert rig.events == ["create 100 first", "accept 100"] and pipes.is_serving()
    pipes.close()


@dataclass
class FakeProactor:
    accepted: list[object] = field(default_factory=list)

    def accept_pipe(self, pipe: object) -> str:
        self.accepted.append(pipe)
        return "future"


@dataclass
class FakeProactorLoop:
    _proactor: FakeProactor = field(default_factory=FakeProactor)
    transports: list[tuple[object, object, dict[str, str]]] = field(default_factory=list)

    def _make_duplex_pipe_transport(
        self, pipe: object, protocol: object, extra: dict[str, str]
    ) -> None:
        self.transports.append((pipe, protocol, extra))


def test_the_proactor_is_used_as_asyncio_uses_it_for_its_own_pipe_servers() -> None:
    loop = FakeProactorLoop()
    io = ProactorPipeIo(loop, r"\\.\pipe\p", wrap=lambda handle: FakePipe(handle, []))
    pipe = io.wrap(7)
    protocol = asyncio.Protocol()

    assert io.accept(pipe) == "future" and loop._proactor.accepted == [pipe]
    io.serve(pipe, protocol)
    assert loop.transports == [(pipe, protocol, {"addr": r"\\.\pipe\p"})]


async def test_a_loop_without_a_proactor_cannot_serve_pipes() -> None:
    with pytest.raises(OSError, match="proactor event loop"):
        ProactorPipeIo(asyncio.get_running_loop(), r"\\.\pipe\p")


@pytest.mark.skipif(sys.platform == "win32", reason="pipe handles exist on Windows")
def test_pipe_handles_are_windows_only() -> None:
    with pytest.raises(OSError, match="Windows only"):
        windows_pipe_handle(7)
