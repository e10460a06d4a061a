"""The control server's Windows branch: it listens through the user-only pipe server, serves
each connection it hands over like a socket client, and maps a failed start to a fatal error.
The pipe server is faked and its connections are socket pairs, so this runs on any OS."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from backend.core.component import FatalError
from backend.core.control_server import ControlServer, Listener
from backend.core.rpc import ClientHub, Dispatcher
from backend.core.winpipe import PipeNameTaken
from backend.protocol.jsonrpc import METHOD_NOT_FOUND
from backend.protocol.peer import RpcPeer

ProtocolFactory = Callable[[], asyncio.BaseProtocol]


@dataclass
class FakePipeServer:
    """Records the start; ``error`` makes it fail."""

    error: OSError | None = None
    started: list[tuple[str, ProtocolFactory]] = field(default_factory=list)
    closed: int = 0
    ready: asyncio.Event = field(default_factory=asyncio.Event)

    async def start(self, address: str, protocol_factory: ProtocolFactory) -> Listener:
        if self.error is not None:
            raise self.error
        self.started.append((address, protocol_factory))
        self.ready.set()
        return self

    def close(self) -> None:
        self.closed += 1


def control(
    address: str, pipes: FakePipeServer, hub: ClientHub, joined: list[RpcPeer]
) -> ControlServer:
    return ControlServer(
        address,
        dispatcher=Dispatcher(),
        hub=hub,
        on_connect=joined.append,
        sys_platform="win32",
        start_pipe_server=pipes.start,
    )


async def wait_until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(5):
        while not condition():
            await asyncio.sleep(0.01)


async def test_a_pipe_connection_is_served_as_a_client_and_the_pipe_closed_at_the_end(
    tmp_path: Path,
) -> None:
    # A file at the address: on Windows the run's end removes nothing (a pipe has no file).
    address = tmp_path / "pipe-name"
    address.write_text("")
    pipes, hub, joined = FakePipeServer(), ClientHub(), []
    server = control(str(address), pipes, hub, joined)
    run = asyncio.create_task(server.run())
    async with asyncio.timeout(5):
        await pipes.ready.wait()
    assert [name for name, _ in pipes.started] == [str(address)]

    served, client = socket.socketpair()
    await asyncio.get_running_loop().connect_accepted_socket(pipes.started[0][1], served)
    reader, writer = await asyncio.open_connection(sock=client)
    writer.write(b'{"jsonrpc": "2.0", "id": 1, "method": "no.such.method"}\n')
    answer = json.loads(await asyncio.wait_for(reader.readline(), 5))

    assert answer["id"] == 1 and answer["error"]["code"] == METHOD_NOT_FOUND
    assert len(joined) == 1 and len(hub) == 1
    writer.close()
    await writer.wait_closed()
    await wait_until(lambda: len(hub) == 0)

    await server.stop()
    await asyncio.wait_for(run, 5)
    assert pipes.closed == 1 and address.exists()


@pytest.mark.parametrize(
    "error",
    [PipeNameTaken(5, "another program holds the pipe"), OSError(2, "no proactor")],
)
async def test_a_pipe_that_cannot_be_served_is_fatal(error: OSError) -> None:
    server = control(r"\\.\pipe\pair-alice-0123", FakePipeServer(error=error), ClientHub(), [])

    with pytest.raises(FatalError, match=r"cannot listen on \\\\.\\pipe\\pair-alice-0123"):
        await server.run()
