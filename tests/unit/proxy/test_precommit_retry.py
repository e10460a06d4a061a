"""A pooled connection the engine had closed is tried once more, on a new connection; a new
connection that breaks is not.

llama-server closes its connection after a stream without saying so; the pool can then hold
several such connections at once. The second try must not take another of them (it once did,
and the request failed over and backed off for seconds). A connection opened for the request
that breaks before the answer is no such race: the engine may have the request, and sending
it again would run it twice (a peer's relay cut under load once did).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest

from backend.workers.proxy.upstream.attempt import Commit, Failure, SentRequest, Timeouts, precommit
from backend.workers.proxy.upstream.engine_client import EngineClient

ANSWER = (
    b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{"done":true}'
)


class OneRequestPerConnection:
    """Answers the first request on each connection (keeping it open, as keep-alive), and
    closes the connection without an answer when a second one comes on it."""

    def __init__(self) -> None:
        self.connections = 0
        self.closed_unanswered = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            for answered in (False, True):
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ),
                    0,
                )
                await reader.readexactly(length)
                if answered:
                    self.closed_unanswered += 1
                    return
                writer.write(ANSWER)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()


class ResetAfterReading:
    """Reads each request whole, then resets its connection (RST) without an answer."""

    def __init__(self) -> None:
        self.requests = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            await reader.readexactly(2)  # the body, b"{}"
            self.requests += 1
        finally:
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()


@pytest.fixture
async def engine() -> AsyncIterator[tuple[str, OneRequestPerConnection]]:
    behaviour = OneRequestPerConnection()
    async with _serving(behaviour.serve) as url:
        yield url, behaviour


@contextlib.asynccontextmanager
async def _serving(
    serve: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
) -> AsyncIterator[str]:
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/api/chat"
    finally:
        server.close()
        await server.wait_closed()


def _pooled() -> aiohttp.ClientSession:
    """As the worker's: SentRequest notes whether a request's connection is a reused one."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), request_class=SentRequest)


def _fresh() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(force_close=True), request_class=SentRequest
    )


@pytest.fixture(params=["aiohttp", "lean"])
async def engines(request: pytest.FixtureRequest) -> AsyncIterator[EngineClient | None]:
    """Each test runs with aiohttp's client (peers) and with the lean one (plain HTTP)."""
    if request.param == "aiohttp":
        yield None
        return
    client = EngineClient()
    try:
        yield client
    finally:
        await client.close()


async def _commit(
    session: aiohttp.ClientSession,
    url: str,
    retry: aiohttp.ClientSession | None,
    engines: EngineClient | None,
) -> Commit | object:
    timeouts = Timeouts(headers=5.0, first_content=5.0)
    outcome = await precommit(
        session,
        "POST",
        url,
        {},
        b"{}",
        timeouts,
        inference=True,
        retry_session=retry,
        engines=engines,
    )
    if isinstance(outcome, Commit):
        outcome.discard()
    return outcome


async def test_the_second_try_takes_a_new_connection_not_another_pooled_one(
    engine: tuple[str, OneRequestPerConnection], engines: EngineClient | None
) -> None:
    url, behaviour = engine
    async with _pooled() as pooled, _fresh() as fresh:
        # Three requests at once leave three kept-alive connections in the pool, each of
        # which the engine will close instead of answering again.
        warm = await asyncio.gather(*(_commit(pooled, url, fresh, engines) for _ in range(3)))
        assert all(isinstance(outcome, Commit) for outcome in warm)
        assert behaviour.connections == 3

        outcome = await _commit(pooled, url, fresh, engines)

        assert isinstance(outcome, Commit), outcome
        assert behaviour.closed_unanswered == 1, "one pooled connection tried, then a new one"
        assert behaviour.connections == 4


async def test_a_new_connection_that_breaks_before_the_answer_is_not_tried_again(
    engines: EngineClient | None,
) -> None:
    behaviour = ResetAfterReading()
    async with _serving(behaviour.serve) as url, _pooled() as pooled, _fresh() as fresh:
        outcome = await _commit(pooled, url, fresh, engines)

    assert isinstance(outcome, Failure) and outcome.kind == "transport", outcome
    assert behaviour.requests == 1, "the engine got the request once"
