"""The broker's control pipe on Windows for real: ``ControlServer`` serves a pipe named by
``backend.protocol.endpoint`` with the user-only DACL (``winpipe_server.py``), and
``open_control_connection`` reaches it through the owner check (``winpipe_client.py``) for one
JSON-RPC round trip; a second server on the same name is refused (the first instance's
``FILE_FLAG_FIRST_PIPE_INSTANCE``). asyncio's default loop on Windows is the proactor these
need. The calls' logic is tested against fakes in ``tests/unit/core/test_winpipe*.py`` and
``tests/unit/protocol/test_winpipe_client*.py``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from backend.core.component import FatalError
from backend.core.control_server import ControlServer
from backend.core.rpc import ClientHub, Dispatcher
from backend.protocol import methods
from backend.protocol.contract import NoParams
from backend.protocol.endpoint import control_address, open_control_connection
from backend.protocol.peer import RpcPeer
from backend.protocol.types.broker import PingResult
from tests.platform.support import only_on

pytestmark = [only_on("win32", "named pipes on the proactor loop"), pytest.mark.timeout(60)]


async def ping(_: NoParams, __: RpcPeer) -> PingResult:
    return PingResult(pong=True, version="platform-test", uptime_ms=1)


def control_server(address: str, hub: ClientHub, joined: list[RpcPeer]) -> ControlServer:
    """A control server routing ``ping``, noting each client it serves in ``joined``."""
    dispatcher = Dispatcher()
    dispatcher.add(methods.PING, ping)
    return ControlServer(address, dispatcher=dispatcher, hub=hub, on_connect=joined.append)


async def serve_until_ready(server: ControlServer, group: asyncio.TaskGroup) -> None:
    """Start ``server.run()`` in ``group`` and return once it listens (or raise its failure)."""
    ready = asyncio.Event()
    server.bind_ready(ready.set)
    run = group.create_task(server.run(), name="control-server")
    waiting = group.create_task(ready.wait(), name="control-ready")
    async with asyncio.timeout(20):
        await asyncio.wait({run, waiting}, return_when=asyncio.FIRST_COMPLETED)
    if run.done():
        waiting.cancel()
        await run  # raises what ended it
    assert ready.is_set()


async def test_a_client_of_this_user_makes_a_round_trip_over_the_control_pipe(
    tmp_path: Path,
) -> None:
    address = control_address(tmp_path)
    assert address.startswith("\\\\.\\pipe\\pair-broker-"), address
    hub = ClientHub()
    joined: list[RpcPeer] = []
    server = control_server(address, hub, joined)

    async with asyncio.TaskGroup() as group:
        await serve_until_ready(server, group)
        try:
            reader, writer = await open_control_connection(address)
            writer.write(b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}\n')
            answer = json.loads(await asyncio.wait_for(reader.readline(), 20))
            writer.close()
            await writer.wait_closed()
            async with asyncio.timeout(20):  # the server sees the client leave
                while len(hub):
                    await asyncio.sleep(0.05)
        finally:
            await server.stop()

    assert answer["id"] == 1, answer
    assert answer["result"] == {"pong": True, "version": "platform-test", "uptime_ms": 1}
    assert len(joined) == 1, "the pipe's client was served as one client"


async def test_a_second_server_on_the_same_pipe_is_refused_naming_it(tmp_path: Path) -> None:
    address = control_address(tmp_path)
    first = control_server(address, ClientHub(), [])
    second = control_server(address, ClientHub(), [])

    async with asyncio.TaskGroup() as group:
        await serve_until_ready(first, group)
        try:
            with pytest.raises(FatalError) as refused:
                await asyncio.wait_for(second.run(), 20)
        finally:
            await first.stop()

    message = str(refused.value)
    assert f"cannot listen on {address}" in message
    assert "another program holds the pipe" in message, message


async def test_nothing_listening_on_a_pipe_name_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no pipe is named"):
        await open_control_connection(control_address(tmp_path))
