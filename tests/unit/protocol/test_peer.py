"""RpcPeer over a real socket pair: bad frames never cost the connection its other requests."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest

from backend.protocol import errors
from backend.protocol.peer import RpcPeer


class RawClient:
    """Writes raw bytes, reads whole response frames."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def receive(self) -> Any:
        line = await asyncio.wait_for(self.reader.readline(), 5)
        assert line, "connection closed"
        return json.loads(line)


async def _handler(method: str, params: Any, peer: RpcPeer) -> Any:
    if method == "echo":
        return params
    if method == "slow":
        await asyncio.sleep(0.3)
        return "slow"
    if method == "boom":
        raise RuntimeError("kaput")
    if method == "invalid":
        raise errors.InvalidParams("Invalid params: 'x' must be an integer")
    raise errors.MethodNotFound(f"Method not found: {method}")


@pytest.fixture
async def served() -> AsyncIterator[RawClient]:
    left, right = socket.socketpair()
    server_reader, server_writer = await asyncio.open_connection(sock=left, limit=2**16)
    client_reader, client_writer = await asyncio.open_connection(sock=right, limit=2**22)
    peer = RpcPeer(server_reader, server_writer, name="server", on_request=_handler, max_frame=1024)
    task = asyncio.create_task(peer.run())
    yield RawClient(client_reader, client_writer)
    client_writer.close()
    await asyncio.wait_for(task, 5)


def _call(request_id: int, method: str, params: Any = None) -> bytes:
    frame: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        frame["params"] = params
    return json.dumps(frame).encode() + b"\n"


async def test_garbage_gets_parse_error_and_the_connection_keeps_working(
    served: RawClient,
) -> None:
    await served.send(b"this is not json\n")
    assert (await served.receive())["error"]["code"] == -32700
    await served.send(_call(1, "echo", {"a": 1}))
    assert await served.receive() == {"jsonrpc": "2.0", "id": 1, "result": {"a": 1}}


async def test_partial_frame_is_a_parse_error_not_a_hang(served: RawClient) -> None:
    await served.send(b'{"jsonrpc":"2.0","id":1,"meth\n')
    reply = await served.receive()
    assert reply["error"]["code"] == -32700
    assert reply["id"] is None
    await served.send(_call(2, "echo", [2]))
    assert (await served.receive())["result"] == [2]


async def test_oversized_frame_is_rejected_and_the_next_request_answered(
    served: RawClient,
) -> None:
    await served.send(b'{"jsonrpc":"2.0","id":9,"method":"echo","params":["' + b"x" * 5000)
    await served.send(b'"]}\n' + _call(3, "echo", ["after"]))
    reply = await served.receive()
    assert reply["error"]["code"] == -32600
    assert reply["error"]["data"]["reason"] == "frame-too-large"
    assert (await served.receive())["result"] == ["after"]


async def test_unknown_method_and_handler_failures_get_their_codes(served: RawClient) -> None:
    await served.send(_call(1, "nope") + _call(2, "boom") + _call(3, "invalid"))
    replies = {reply["id"]: reply for reply in [await served.receive() for _ in range(3)]}
    assert replies[1]["error"]["code"] == -32601
    assert replies[2]["error"]["code"] == -32603
    assert "kaput" in replies[2]["error"]["message"]
    assert replies[3]["error"] == {
        "code": -32602,
        "message": "Invalid params: 'x' must be an integer",
    }


async def test_a_slow_request_does_not_hold_up_a_fast_one(served: RawClient) -> None:
    await served.send(_call(1, "slow") + _call(2, "echo", ["fast"]))
    first, second = await served.receive(), await served.receive()
    assert (first["id"], second["id"]) == (2, 1)


async def test_batch_answers_requests_and_invalid_members_together(served: RawClient) -> None:
    batch = [
        {"jsonrpc": "2.0", "id": 1, "method": "echo", "params": [1]},
        {"jsonrpc": "2.0", "method": "echo", "params": [2]},
        {"jsonrpc": "2.0", "id": 3},
        {"jsonrpc": "2.0", "id": 4, "method": "nope"},
    ]
    await served.send(json.dumps(batch).encode() + b"\n")
    reply = await served.receive()
    assert isinstance(reply, list)
    by_id = {item["id"]: item for item in reply}
    assert set(by_id) == {1, 3, 4}
    assert by_id[1]["result"] == [1]
    assert by_id[3]["error"]["code"] == -32600
    assert by_id[4]["error"]["code"] == -32601


async def test_empty_batch_is_an_invalid_request(served: RawClient) -> None:
    await served.send(b"[]\n")
    assert (await served.receive())["error"]["code"] == -32600


async def test_a_batch_larger_than_the_in_flight_bound_is_refused_whole() -> None:
    left, right = socket.socketpair()
    peer = RpcPeer(
        *await asyncio.open_connection(sock=left), name="s", on_request=_handler, max_in_flight=4
    )
    task = asyncio.create_task(peer.run())
    client = RawClient(*await asyncio.open_connection(sock=right))
    calls = [{"jsonrpc": "2.0", "id": n, "method": "echo", "params": [n]} for n in range(5)]
    await client.send(json.dumps(calls).encode() + b"\n")
    refused = await client.receive()
    assert refused["error"]["code"] == -32600
    assert refused["error"]["data"] == {"reason": "batch-too-large", "size": 5}
    await client.send(json.dumps(calls[:4]).encode() + b"\n")
    assert len(await client.receive()) == 4  # the bound itself is served
    client.writer.close()
    await asyncio.wait_for(task, 5)


async def test_peer_calls_map_errors_to_exceptions_and_fail_on_close() -> None:
    left, right = socket.socketpair()
    server = RpcPeer(*await asyncio.open_connection(sock=left), name="s", on_request=_handler)
    client = RpcPeer(*await asyncio.open_connection(sock=right), name="c")
    tasks = [asyncio.create_task(server.run()), asyncio.create_task(client.run())]
    assert await client.call("echo", {"k": "v"}) == {"k": "v"}
    with pytest.raises(errors.InvalidParams):
        await client.call("invalid")
    with pytest.raises(errors.CallTimeout):
        await client.call("slow", timeout=0.05)
    pending = asyncio.create_task(client.call("slow"))
    await asyncio.sleep(0.01)
    server.abort()
    with pytest.raises(errors.ConnectionLost):
        await pending
    client.close()
    await asyncio.wait_for(asyncio.gather(*tasks), 5)


async def _socket_peer() -> tuple[RpcPeer, asyncio.Task[None], socket.socket]:
    left, right = socket.socketpair()
    reader, writer = await asyncio.open_connection(sock=left)
    peer = RpcPeer(reader, writer, name="eager")
    task = asyncio.create_task(peer.run())
    await asyncio.sleep(0)
    right.setblocking(False)
    return peer, task, right


def _frames(sock: socket.socket) -> list[Any]:
    data = b""
    while True:
        try:
            chunk = sock.recv(1 << 20)
        except BlockingIOError:
            break
        if not chunk:
            break
        data += chunk
    return [json.loads(line) for line in data.splitlines()]


async def test_a_notification_is_in_the_socket_before_notify_returns() -> None:
    peer, task, far = await _socket_peer()
    try:
        peer.notify("first", {"n": 1})
        # No turn of the loop has passed: the write task cannot have sent it.
        assert [frame["method"] for frame in _frames(far)] == ["first"]
    finally:
        peer.close()
        await asyncio.wait_for(task, 5)
        far.close()


async def test_frames_keep_their_order_while_the_transport_is_backed_up() -> None:
    peer, task, far = await _socket_peer()
    try:
        big = "x" * (1 << 20)  # more than the socket takes at once: the rest waits
        peer.notify("big", {"pad": big})
        data = b""

        def drain_far() -> None:
            nonlocal data
            try:
                while chunk := far.recv(1 << 16):
                    data += chunk
            except BlockingIOError:
                pass

        for n in range(50):
            # Frames queue while the transport holds unsent bytes; the far side reading
            # now and then lets it catch up between them, with frames still queued.
            peer.notify("small", {"n": n})
            if n % 7 == 3:
                drain_far()
                await asyncio.sleep(0)
        for _ in range(500):
            drain_far()
            if data.count(b"\n") >= 51:
                break
            await asyncio.sleep(0.01)
        received = [json.loads(line) for line in data.splitlines()]
        assert [frame["method"] for frame in received] == ["big"] + ["small"] * 50
        assert [frame["params"]["n"] for frame in received[1:]] == list(range(50))
    finally:
        peer.close()
        await asyncio.wait_for(task, 5)
        far.close()
