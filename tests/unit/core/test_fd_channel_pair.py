"""Which channel ``channel_pair`` makes: sequenced packets first, else datagrams, and none where a
whole message could not pass (macOS caps a local datagram at the sender's buffer size)."""

from __future__ import annotations

import asyncio
import errno
import os
import socket
from collections.abc import Callable
from typing import Any

import pytest

from backend.core.fd_channel import MAX_MESSAGE, FdChannel, channel_pair

pytestmark = pytest.mark.skipif(
    not hasattr(socket, "AF_UNIX") or not hasattr(socket, "send_fds"),
    reason="no descriptor passing on this system",
)


class CappedBuffer(socket.socket):
    """A real socket whose send buffer cannot grow past ``cap`` (as on a BSD with a low limit)."""

    cap = 2048

    def setsockopt(self, *args: object) -> None:
        pass  # the system keeps its default

    def getsockopt(self, level: int, option: int, *rest: object) -> int:  # type: ignore[override]
        assert level == socket.SOL_SOCKET and option in (socket.SO_SNDBUF, socket.SO_RCVBUF)
        return self.cap


def datagrams_only(
    wrap: type[socket.socket] | None = None, made: list[socket.socket] | None = None
) -> Callable[[int, int], tuple[socket.socket, socket.socket]]:
    def make(family: int, kind: int) -> tuple[socket.socket, socket.socket]:
        if kind != socket.SOCK_DGRAM:
            raise OSError("sequenced packets are not supported here")
        ends = socket.socketpair(family, kind)
        if wrap is not None:
            ends = (wrap(fileno=ends[0].detach()), wrap(fileno=ends[1].detach()))
        if made is not None:
            made.extend(ends)
        return ends

    return make


def test_sequenced_packets_are_preferred_where_the_system_has_them() -> None:
    if not hasattr(socket, "SOCK_SEQPACKET"):
        pytest.skip("no SOCK_SEQPACKET here")
    pair = channel_pair()
    assert pair is not None
    try:
        assert {end.type for end in pair} == {socket.SOCK_SEQPACKET}
    finally:
        for end in pair:
            end.close()


def test_a_datagram_pair_whose_buffer_takes_a_whole_message_carries_one_with_a_descriptor() -> None:
    pair = channel_pair(datagrams_only())
    assert pair is not None
    ours, theirs = pair
    read, write = os.pipe()
    try:
        assert ours.type == socket.SOCK_DGRAM
        message = b"x" * MAX_MESSAGE
        socket.send_fds(ours, [message], [write])
        data, fds, _, _ = socket.recv_fds(theirs, MAX_MESSAGE, 1)
        assert data == message and len(fds) == 1
        os.write(fds[0], b"!")
        assert os.read(read, 1) == b"!"
        os.close(fds[0])
    finally:
        for fd in (read, write):
            os.close(fd)
        ours.close()
        theirs.close()


def test_a_datagram_pair_capped_under_a_message_is_refused_and_closed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    made: list[socket.socket] = []
    assert channel_pair(datagrams_only(CappedBuffer, made)) is None
    assert len(made) == 2 and all(end.fileno() == -1 for end in made)
    assert "cannot carry 4096 bytes" in caplog.text


def test_a_datagram_pair_capped_at_exactly_a_message_is_kept() -> None:
    class Enough(CappedBuffer):
        cap = MAX_MESSAGE

    pair = channel_pair(datagrams_only(Enough))
    assert pair is not None
    for end in pair:
        end.close()


def test_a_pair_whose_receive_buffer_alone_is_capped_is_refused() -> None:
    class CappedReceiver(CappedBuffer):
        def getsockopt(self, level: int, option: int, *rest: object) -> int:  # type: ignore[override]
            return self.cap if option == socket.SO_RCVBUF else 1 << 20

    assert channel_pair(datagrams_only(CappedReceiver)) is None


class NoBufferFirst(socket.socket):
    """A real socket whose first sends fail with ENOBUFS, as macOS answers for a full receiver
    of a local datagram (and no writable event follows)."""

    refusals = 3
    attempts = 0

    def sendmsg(self, *args: Any, **kwargs: Any) -> int:
        type(self).attempts += 1
        if type(self).refusals > 0:
            type(self).refusals -= 1
            raise OSError(errno.ENOBUFS, "No buffer space available")
        return super().sendmsg(*args, **kwargs)


async def test_a_send_refused_for_want_of_buffer_space_is_tried_again_shortly_not_in_a_spin() -> (
    None
):
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    sender = FdChannel(NoBufferFirst(fileno=ours.detach()))
    received: list[bytes] = []
    receiver = FdChannel(theirs, lambda data, fds: received.append(data))
    sender.start()
    receiver.start()
    try:
        sender.send(b"first")
        sender.send(b"second")
        assert sender.backed_up and not sender.closed
        async with asyncio.timeout(5):
            await sender.flushed()
            while len(received) < 2:
                await asyncio.sleep(0.005)
        assert received == [b"first", b"second"] and not sender.closed
        # Three refusals, then the two messages: each refusal waited for a retry, none spun.
        assert NoBufferFirst.attempts == 5
    finally:
        sender.close()
        receiver.close()
