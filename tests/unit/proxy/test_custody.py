"""Custody of waiting requests (docs/ARCHITECTURE.md): the descriptor channel, the worker's
hold and release, the broker's desk across a worker's death, the scheduler's "passed over"
call, and a resumed job's numbering. Real Unix sockets and memory files, no processes."""

from __future__ import annotations

import asyncio
import os
import socket

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from backend.components.proxy.custody import CustodyDesk
from backend.core.fd_channel import FdChannel, channel_pair
from backend.protocol import custody
from backend.protocol.custody import Held, Released
from backend.protocol.types.jobs import JobEvent
from backend.workers.proxy.channels.custody import Custody, Primed, raw_request
from backend.workers.proxy.channels.jobs import JobLog
from backend.workers.proxy.scheduler.engine_scheduler import EngineScheduler, Ticket
from tests.unit.proxy.scheduler_fakes import FakeEngine, make, pinned, settle

pytestmark = pytest.mark.skipif(channel_pair() is None, reason="no descriptor passing here")


def _pair() -> tuple[socket.socket, socket.socket]:
    pair = channel_pair()
    assert pair is not None
    return pair


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else -1


def _record(number: int, job: str = "n1/run/1", seq: int = 2) -> Held:
    return Held(number=number, door="ollama", job=job, seq=seq, attempt=1, created_at=5.0)


async def test_a_backed_up_channel_keeps_order_and_its_own_descriptor_copies() -> None:
    ours, theirs = _pair()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # fills after a few messages
    sender = FdChannel(ours)
    sender.start()
    got: list[tuple[bytes, int]] = []

    def received(data: bytes, fds: list[int]) -> None:
        got.append((data, len(fds)))
        for fd in fds:
            os.close(fd)

    receiver = FdChannel(theirs, received)
    messages = [b"%04d" % n + b"x" * 900 for n in range(200)]
    for message in messages:
        r, w = os.pipe()
        sender.send(message, [r])
        os.close(r)  # the channel duplicated what it could not send yet
        os.close(w)
    assert sender.backed_up, "the small buffer never filled: the test proves nothing"
    assert not sender.try_send(b"late", []), "a message jumped the queue"
    receiver.start()
    await asyncio.wait_for(sender.flushed(), 5)
    for _ in range(100):
        if len(got) == len(messages):
            break
        await asyncio.sleep(0.01)
    assert [data for data, _ in got] == messages
    assert all(count == 1 for _, count in got)
    sender.close()
    receiver.close()


async def test_what_a_dead_sender_sent_is_still_read_by_drain() -> None:
    ours, theirs = _pair()
    got: list[bytes] = []
    receiver = FdChannel(theirs, lambda data, fds: got.append(data))
    sender = FdChannel(ours)
    for n in range(5):
        sender.send(custody.encode(Released(number=n)))
    sender.close()  # the worker is gone; the kernel keeps what it had sent
    receiver.drain()
    assert [custody.decode(data) for data in got] == [Released(number=n) for n in range(5)]
    receiver.close()


def test_messages_that_are_not_custody_messages_are_refused() -> None:
    for data in (b"", b"{}", b'{"type":"held","number":"x"}', b"\xff", b'{"type":"other"}'):
        with pytest.raises(custody.BadMessage):
            custody.decode(data)
    assert custody.decode(custody.encode(_record(3))) == _record(3)


def test_the_copy_of_a_request_is_its_decoded_body_with_its_own_length() -> None:
    request = make_mocked_request(
        "POST",
        "/api/chat?x=1",
        headers={
            "Host": "127.0.0.1:5000",
            "Content-Type": "application/json",
            "Content-Encoding": "gzip",
            "Transfer-Encoding": "chunked",
            "Expect": "100-continue",
            "X-PAIR-Session": "s1",
        },
    )
    raw = raw_request(request, b'{"model":"m"}')
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /api/chat?x=1 HTTP/1.1"
    names = [line.split(b":", 1)[0].lower() for line in lines[1:]]
    assert b"content-encoding" not in names and b"transfer-encoding" not in names
    assert b"expect" not in names
    assert b"X-PAIR-Session: s1" in lines and b"Content-Length: 13" in lines
    assert body == b'{"model":"m"}'


class _Job:
    key = "n1/run/7"
    seq = 3
    attempt = 1
    created_at = 12.5


async def _connected() -> tuple[socket.socket, socket.socket]:
    client, server = socket.socketpair()
    client.setblocking(False)
    server.setblocking(False)
    return client, server


async def _worker_with_a_client(
    desk: CustodyDesk,
) -> tuple[Custody, socket.socket, asyncio.Transport, web.Request]:
    """A worker on the desk's new channel, a client connection to it and its request."""
    worker_end = desk.open()
    assert worker_end is not None
    worker = Custody(socket.socket(fileno=os.dup(worker_end.fileno())))
    worker.start(lambda *args: asyncio.sleep(0))
    client, server = await _connected()
    loop = asyncio.get_running_loop()
    transport, _ = await loop.connect_accepted_socket(asyncio.Protocol, server)
    request = make_mocked_request("POST", "/api/chat", headers={"Host": "h"}, transport=transport)
    return worker, client, transport, request


async def test_a_held_request_survives_its_worker_and_is_given_to_the_next() -> None:
    desk = CustodyDesk(progress=lambda job: (6, 2) if job == _Job.key else None)
    worker, client, transport, request = await _worker_with_a_client(desk)
    held = worker.hold(request, "ollama", b'{"model":"m"}', _Job())  # type: ignore[arg-type]
    other = worker.hold(request, "ollama", b'{"model":"m"}', _Job())  # type: ignore[arg-type]
    assert held is not None and other is not None and held != other
    worker.release(other)
    await worker.released()
    transport.abort()  # the worker is killed: its own copy of the connection goes
    worker.close()
    kept = desk.worker_gone()
    assert kept == frozenset({_Job.key})
    # The client still has a connection: the broker's copy keeps it open.
    client.send(b"ping")

    given: list[tuple[Held, bytes]] = []
    done = asyncio.Event()

    async def replay(record: Held, conn: socket.socket, raw: bytes) -> None:
        given.append((record, raw))
        conn.sendall(b"answered")
        conn.close()
        done.set()

    next_end = desk.open()
    assert next_end is not None
    successor = Custody(socket.socket(fileno=os.dup(next_end.fileno())))
    successor.start(replay)
    await asyncio.wait_for(done.wait(), 5)
    [(record, raw)] = given
    # The job goes on after the events the broker saw after the hold (seq 6, attempt 2).
    assert (record.job, record.seq, record.attempt, record.created_at) == (_Job.key, 6, 2, 12.5)
    assert raw.endswith(b'\r\n\r\n{"model":"m"}') and raw.startswith(b"POST /api/chat ")
    await asyncio.sleep(0.05)
    assert client.recv(100) == b"answered"
    assert desk.worker_gone() == frozenset(), "a request given away was kept as well"
    successor.close()
    desk.close()
    client.close()


async def test_a_released_request_is_let_go_and_shutdown_closes_what_is_held() -> None:
    before = _open_fds()
    desk = CustodyDesk()
    worker, client, transport, request = await _worker_with_a_client(desk)
    first = worker.hold(request, "ollama", b"{}", _Job())  # type: ignore[arg-type]
    second = worker.hold(request, "ollama", b"{}", _Job())  # type: ignore[arg-type]
    assert first is not None and second is not None
    worker.release(first)
    worker.release(first)  # twice: nothing more is sent
    for _ in range(50):
        if desk.held == 1:
            break
        await asyncio.sleep(0.01)
    assert desk.held == 1
    transport.abort()
    worker.close()
    desk.close()  # the broker stops: the client sees its connection end, not a hang
    await asyncio.sleep(0.05)
    assert client.recv(10) == b""
    client.close()
    if before >= 0:
        assert _open_fds() <= before, "a descriptor was left open"


async def test_nothing_is_held_without_a_channel_or_over_tls() -> None:
    request = make_mocked_request("POST", "/api/chat")
    assert Custody(None).hold(request, "ollama", b"{}", _Job()) is None  # type: ignore[arg-type]


async def test_the_scheduler_says_when_a_pass_leaves_a_request_waiting() -> None:
    engine = FakeEngine(slots=1)
    scheduler: EngineScheduler = make(engine, pinned(1))
    waited: list[str] = []
    first = asyncio.create_task(scheduler.admit("a", on_wait=lambda: waited.append("first")))
    second = asyncio.create_task(scheduler.admit("a", on_wait=lambda: waited.append("second")))
    await settle()
    assert first.done() and not second.done()
    assert waited == ["second"], "only the request left in the queue waits"
    scheduler.release(first.result())
    await settle()
    ticket: Ticket = second.result()
    assert waited == ["second"], "a waiting request is told once"
    scheduler.release(ticket)
    await scheduler.aclose()


def test_a_resumed_job_numbers_its_events_after_the_last_one() -> None:
    sent: list[JobEvent] = []
    log = JobLog(sent.extend)
    job = log.new(
        origin="n1",  # type: ignore[arg-type]
        engine="ollama",
        model="m",
        path="/api/chat",
        key="n1/old/3",  # type: ignore[arg-type]
        resumed=(6, 100.0),
    )
    job.submitted(3, None)
    job.completed()
    assert [(e.seq, e.kind, e.key) for e in sent] == [
        (7, "submitted", "n1/old/3"),
        (8, "completed", "n1/old/3"),
    ]
    assert all(e.created_at == 100.0 for e in sent)


async def test_a_primed_connection_feeds_the_request_first() -> None:
    got: list[bytes] = []
    made: list[object] = []
    lost: list[object] = []

    class Inner(asyncio.Protocol):
        def data_received(self, data: bytes) -> None:
            got.append(data)

    loop = asyncio.get_running_loop()
    client, server = await _connected()
    transport, _ = await loop.connect_accepted_socket(
        lambda: Primed(Inner(), b"GET / HTTP/1.1\r\n\r\n", made.append, lost.append), server
    )
    client.send(b"more")
    await asyncio.sleep(0.05)
    assert got[0] == b"GET / HTTP/1.1\r\n\r\n" and b"".join(got[1:]) == b"more"
    assert made == [transport]
    transport.close()
    await asyncio.sleep(0.01)
    assert lost == [transport]
    client.close()
