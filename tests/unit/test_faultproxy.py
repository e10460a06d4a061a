"""The tests' TCP fault proxy, against an in-process upstream on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from tests.support.faultproxy import Fault, FaultProxy

ANSWER = bytes(range(256)) * 8  # 2 KiB, sent for every line the upstream reads
QUIET_S = 0.3  # how long "nothing arrives" is watched for


@dataclass
class Upstream:
    """Answers each line it reads with ``ANSWER``; records its connections and their ends."""

    received: list[bytes] = field(default_factory=list)
    connections: int = 0
    hung_up: int = 0
    server: asyncio.Server | None = None

    async def start(self) -> Upstream:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while line := await reader.readline():
                self.received.append(line)
                writer.write(ANSWER)
                await writer.drain()
            self.hung_up += 1
        except OSError:
            self.hung_up += 1
        finally:
            writer.close()


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    server = await Upstream().start()
    yield server
    assert server.server is not None
    server.server.close()
    await server.server.wait_closed()


@pytest.fixture
async def proxy(upstream: Upstream) -> AsyncIterator[FaultProxy]:
    async with FaultProxy("127.0.0.1", upstream.port) as fault:
        yield fault


async def _connect(proxy: FaultProxy) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", proxy.port)


async def _ask(proxy: FaultProxy) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await _connect(proxy)
    writer.write(b"hello\n")
    await writer.drain()
    return reader, writer


async def _read_all(reader: asyncio.StreamReader) -> bytes:
    """Everything until EOF (raises on a reset)."""
    async with asyncio.timeout(5):
        return await reader.read()


async def _read_into(reader: asyncio.StreamReader, got: bytearray) -> None:
    """Append what arrives to ``got`` until EOF (raises on a reset)."""
    async with asyncio.timeout(5):
        while chunk := await reader.read(100):
            got += chunk


async def _quiet(reader: asyncio.StreamReader) -> bool:
    """Nothing (not even EOF) arrives for ``QUIET_S``."""
    try:
        async with asyncio.timeout(QUIET_S):
            await reader.read(1)
    except TimeoutError:
        return True
    return False


async def _until(check: object, timeout: float = 5.0) -> None:
    assert callable(check)
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.01)


async def test_forward_passes_bytes_both_ways_and_counts_them(
    proxy: FaultProxy, upstream: Upstream
) -> None:
    reader, writer = await _ask(proxy)
    async with asyncio.timeout(5):
        answer = await reader.readexactly(len(ANSWER))
    writer.close()
    await writer.wait_closed()

    assert answer == ANSWER and upstream.received == [b"hello\n"]
    assert proxy.accepted == 1
    await _until(lambda: proxy.open == 0)
    link = proxy.links[0]
    assert (link.sent_up, link.sent_down, link.faulted) == (6, len(ANSWER), False)
    await _until(lambda: upstream.hung_up == 1)  # the client's hang-up reached the upstream


async def test_the_upstream_hanging_up_closes_the_client_cleanly(upstream: Upstream) -> None:
    async with FaultProxy("127.0.0.1", upstream.port) as proxy:
        reader, writer = await _ask(proxy)
        await reader.readexactly(len(ANSWER))
        assert upstream.server is not None
        upstream.server.close()  # the listener only; the connection goes on
        writer.write_eof()  # the upstream sees EOF, closes; the proxy closes us with a FIN
        assert await _read_all(reader) == b""
        writer.close()


async def test_drop_closes_before_any_byte_and_never_dials(
    proxy: FaultProxy, upstream: Upstream
) -> None:
    proxy.set_fault(Fault.drop())
    reader, writer = await _ask(proxy)

    assert await _read_all(reader) == b""  # a clean FIN, not a reset
    writer.close()
    assert upstream.connections == 0 and proxy.links[0].faulted


async def test_reset_answers_the_connection_with_an_rst(
    proxy: FaultProxy, upstream: Upstream
) -> None:
    proxy.set_fault(Fault.reset())
    reader, writer = await _ask(proxy)

    with pytest.raises(ConnectionResetError):
        await _read_all(reader)
    writer.close()
    assert upstream.connections == 0


async def test_reset_after_n_bytes_forwards_exactly_n_then_resets(
    proxy: FaultProxy, upstream: Upstream
) -> None:
    proxy.set_fault(Fault.reset(after_bytes=700))
    reader, writer = await _ask(proxy)

    got = bytearray()
    with pytest.raises(ConnectionResetError):
        await _read_into(reader, got)
    writer.close()
    assert got == ANSWER[:700] and proxy.links[0].sent_down == 700
    await _until(lambda: upstream.hung_up == 1)  # the upstream's side was closed too


async def test_reset_after_n_bytes_in_whole_chunks_forwards_the_chunk_that_reaches_n(
    proxy: FaultProxy, upstream: Upstream
) -> None:
    proxy.set_fault(Fault("reset", after_bytes=700, whole_chunks=True))
    reader, writer = await _ask(proxy)

    got = bytearray()
    with pytest.raises(ConnectionResetError):
        await _read_into(reader, got)
    writer.close()
    # The 2 KiB answer is written at once: the chunk holding byte 700 goes whole, then RST.
    assert len(got) > 700 and got == ANSWER[: len(got)] == ANSWER[: proxy.links[0].sent_down]


async def test_stall_after_n_bytes_keeps_both_connections_open_until_the_client_leaves(
    proxy: FaultProxy, upstream: Upstream
) -> None:
    proxy.set_fault(Fault.stall(after_bytes=300))
    reader, writer = await _ask(proxy)
    async with asyncio.timeout(5):
        assert await reader.readexactly(300) == ANSWER[:300]

    writer.write(b"more\n")  # read by the proxy, never forwarded
    await writer.drain()
    assert await _quiet(reader)  # no byte, no EOF: the connection is open and silent
    assert upstream.received == [b"hello\n"] and upstream.hung_up == 0
    assert proxy.open == 1 and proxy.links[0].faulted

    writer.close()
    await _until(lambda: upstream.hung_up == 1 and proxy.open == 0)


async def test_stall_at_zero_sends_the_request_but_no_answer(
    proxy: FaultProxy, upstream: Upstream
) -> None:
    proxy.set_fault(Fault.stall())
    reader, writer = await _ask(proxy)

    assert await _quiet(reader)
    assert upstream.received == [b"hello\n"]  # the upstream has the request
    writer.close()


async def test_blackhole_accepts_and_never_reads_answers_or_dials(
    proxy: FaultProxy, upstream: Upstream
) -> None:
    proxy.set_fault(Fault.blackhole())
    reader, writer = await _ask(proxy)

    assert await _quiet(reader)
    assert upstream.connections == 0 and proxy.links[0].sent_up == 0
    assert proxy.open == 1
    proxy.sever()
    with pytest.raises(ConnectionResetError):  # closed with our bytes unread: an RST
        await _read_all(reader)
    await _until(lambda: proxy.open == 0)
    writer.close()


async def test_delays_hold_the_connection_and_each_chunk(proxy: FaultProxy) -> None:
    proxy.set_fault(Fault.forward(delay_s=0.2, chunk_delay_s=0.1))
    before = time.monotonic()
    reader, writer = await _ask(proxy)
    async with asyncio.timeout(5):
        assert await reader.readexactly(len(ANSWER)) == ANSWER
    # At least the connection's delay plus one chunk each way (a lower bound only).
    assert time.monotonic() - before >= 0.2 + 0.1 + 0.1
    writer.close()


async def test_a_new_fault_applies_to_new_connections_and_sever_ends_the_old_ones(
    proxy: FaultProxy, upstream: Upstream
) -> None:
    kept_reader, kept_writer = await _ask(proxy)
    await kept_reader.readexactly(len(ANSWER))
    proxy.set_fault(Fault.drop())

    reader, writer = await _ask(proxy)
    assert await _read_all(reader) == b""  # the new connection is dropped ...
    writer.close()
    kept_writer.write(b"again\n")  # ... the old one still forwards
    async with asyncio.timeout(5):
        assert await kept_reader.readexactly(len(ANSWER)) == ANSWER
    assert [link.fault.action for link in proxy.links] == ["forward", "drop"]

    proxy.sever()
    assert await _read_all(kept_reader) == b""
    kept_writer.close()
    await _until(lambda: proxy.open == 0)
    assert upstream.received == [b"hello\n", b"again\n"]


async def test_an_upstream_that_is_down_resets_the_client() -> None:
    upstream = await Upstream().start()
    port = upstream.port
    assert upstream.server is not None
    upstream.server.close()
    await upstream.server.wait_closed()
    async with FaultProxy("127.0.0.1", port) as proxy:
        reader, writer = await _ask(proxy)
        with pytest.raises(ConnectionResetError):
            await _read_all(reader)
        writer.close()


async def test_aclose_ends_every_connection_and_stops_listening(upstream: Upstream) -> None:
    proxy = await FaultProxy.to_url(f"http://127.0.0.1:{upstream.port}/api").start()
    port = proxy.port
    forwarding_reader, forwarding = await _ask(proxy)
    await forwarding_reader.readexactly(len(ANSWER))
    proxy.set_fault(Fault.blackhole())
    held_reader, held = await _ask(proxy)
    proxy.set_fault(Fault.stall())
    stalled_reader, stalled = await _ask(proxy)
    await _until(lambda: len(upstream.received) == 2)  # the stalled link forwarded its line

    await proxy.aclose()

    assert proxy.open == 0
    for reader in (forwarding_reader, held_reader, stalled_reader):
        # Aborted: a FIN, or an RST where bytes we sent were still unread.
        with contextlib.suppress(ConnectionResetError):
            assert await _read_all(reader) == b""
    for writer in (forwarding, held, stalled):
        writer.close()
    with pytest.raises(ConnectionRefusedError):
        await asyncio.open_connection("127.0.0.1", port)
    await _until(lambda: upstream.hung_up == 2)  # forwarded and stalled links were dialled


async def test_a_boundary_moves_the_cut_to_just_after_its_next_occurrence(
    proxy: FaultProxy,
) -> None:
    proxy.set_fault(Fault.stall(after_bytes=300, boundary=bytes([77, 78])))
    reader, writer = await _ask(proxy)
    async with asyncio.timeout(5):
        got = await reader.readexactly(ANSWER.index(bytes([77, 78]), 300) + 2)
    assert got.endswith(bytes([77, 78])) and await _quiet(reader)
    writer.close()
