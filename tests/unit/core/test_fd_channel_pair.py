"""Which channel ``channel_pair`` makes: sequenced packets first, else datagrams, and none where a
whole message could not pass (macOS caps a local datagram at the sender's buffer size)."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable

import pytest

from backend.core.fd_channel import MAX_MESSAGE, channel_pair

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
        assert (level, option) == (socket.SOL_SOCKET, socket.SO_SNDBUF)
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
