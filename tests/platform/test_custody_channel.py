"""The custody channel this system gives for real (``backend.core.fd_channel.channel_pair``, made
by the proxy's ``CustodyDesk``): either a pair that carries whole messages of ``MAX_MESSAGE``
bytes with a descriptor, one at a time and in a burst the reader only drains later, or none, and
then the proxy runs without custody. For macOS, whose local datagrams are capped by their
sockets' buffers; it runs on Linux as well (sequenced packets), where it checks itself. Which kind
``channel_pair`` picks is tested against capped sockets in
``tests/unit/core/test_fd_channel_pair.py``."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from collections.abc import Iterator

import pytest

from backend.components.proxy.custody import CustodyDesk
from backend.core.fd_channel import MAX_MESSAGE, FdChannel, channel_pair

pytestmark = [
    pytest.mark.skipif(
        not hasattr(socket, "AF_UNIX") or not hasattr(socket, "send_fds"),
        reason=f"macOS and Linux only (descriptors passed over AF_UNIX); this is {sys.platform}",
    ),
    pytest.mark.timeout(60),
]

# Half a MiB of whole messages: more than a Linux sender's default buffer takes (the rest waits
# in the channel's outbox), and far more than a macOS local datagram receiver's default 4 KiB.
BURST = 128


class Received:
    """What a channel's reader got: each message with the inode behind each descriptor that
    came with it (one each is expected: the pipe sent)."""

    def __init__(self) -> None:
        self.messages: list[tuple[bytes, list[int]]] = []
        self.arrived = asyncio.Event()

    def __call__(self, message: bytes, fds: list[int]) -> None:
        try:
            self.messages.append((message, [os.fstat(fd).st_ino for fd in fds]))
        finally:
            for fd in fds:
                os.close(fd)
        self.arrived.set()

    async def wait_for(self, count: int) -> None:
        async with asyncio.timeout(30):
            while len(self.messages) < count:
                self.arrived.clear()
                await self.arrived.wait()


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """This system's channel pair; the test is skipped where there is none (the first test
    checks the proxy has no custody then)."""
    ends = channel_pair()
    if ends is None:
        pytest.skip("no custody channel on this system")
    yield ends
    for end in ends:
        end.close()


@pytest.fixture
def pipe_end() -> Iterator[int]:
    """A pipe's read end: the descriptor the messages carry (each receiver gets its own)."""
    read, write = os.pipe()
    yield read
    os.close(read)
    os.close(write)


def message(number: int) -> bytes:
    """A whole message: ``MAX_MESSAGE`` bytes, its number first."""
    return f"{number:08d}".encode().ljust(MAX_MESSAGE, b".")


async def test_the_proxy_has_custody_exactly_where_a_channel_can_be_made() -> None:
    made = channel_pair()
    desk = CustodyDesk()
    try:
        theirs = desk.open()
        assert (theirs is None) is (made is None)
    finally:
        desk.close()
        for end in made or ():
            end.close()


async def test_a_whole_message_and_a_descriptor_cross(
    pair: tuple[socket.socket, socket.socket], pipe_end: int
) -> None:
    received = Received()
    sender, reader = FdChannel(pair[0]), FdChannel(pair[1], received)
    reader.start()
    try:
        sender.send(message(1), [pipe_end])
        await sender.flushed()
        await received.wait_for(1)

        assert received.messages == [(message(1), [os.fstat(pipe_end).st_ino])]
        assert not sender.closed and not reader.closed
    finally:
        sender.close()
        reader.close()


async def test_a_burst_waits_for_a_reader_that_comes_later_and_all_of_it_arrives_in_order(
    pair: tuple[socket.socket, socket.socket], pipe_end: int
) -> None:
    received = Received()
    sender, reader = FdChannel(pair[0]), FdChannel(pair[1], received)
    try:
        for number in range(BURST):
            sender.send(message(number), [pipe_end])
        assert not sender.closed, "a burst the reader had not read yet closed the channel"

        reader.start()
        await sender.flushed()
        await received.wait_for(BURST)

        inode = os.fstat(pipe_end).st_ino
        assert received.messages == [(message(number), [inode]) for number in range(BURST)]
        assert not sender.closed and not reader.closed
    finally:
        sender.close()
        reader.close()
