"""A worker's frame is in its stdout pipe when ``write`` returns, on asyncio's loop and on
uvloop alike: a proxy worker's job end must reach the broker's pipe before its client's last
byte leaves (research G4). (uvloop before 0.22 deferred every transport's writes to the end
of the loop's turn, in no set order between transports.)"""

from __future__ import annotations

import asyncio
import fcntl
import os
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

uvloop = pytest.importorskip("uvloop")

LOOPS: dict[str, Callable[[Coroutine[Any, Any, None]], None]] = {
    "asyncio": asyncio.run,
    "uvloop": uvloop.run,
}


async def pipe_writer() -> tuple[int, int, asyncio.StreamWriter]:
    """A pipe and a writer over its write end, as ``open_stdio_channel`` makes one."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.connect_write_pipe(
        lambda: asyncio.streams.FlowControlMixin(loop), os.fdopen(write_fd, "wb", 0)
    )
    return read_fd, write_fd, asyncio.StreamWriter(transport, protocol, None, loop)


def pending(read_fd: int) -> bytes:
    try:
        return os.read(read_fd, 1 << 20)
    except BlockingIOError:
        return b""


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_a_frame_is_in_the_pipe_before_write_returns(loop: str) -> None:
    seen: dict[str, bytes] = {}

    async def main() -> None:
        read_fd, _, writer = await pipe_writer()
        writer.write(b'{"jsonrpc":"2.0"}\n')
        seen["at once"] = pending(read_fd)  # no await between: the loop has not turned
        writer.close()
        os.close(read_fd)

    LOOPS[loop](main())
    assert seen["at once"] == b'{"jsonrpc":"2.0"}\n'


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_what_a_full_pipe_does_not_take_follows_in_order(loop: str) -> None:
    got = bytearray()
    frames = [b"%05d" % n + b"x" * 1000 + b"\n" for n in range(40)]  # 40 kB: more than the pipe

    async def main() -> None:
        read_fd, write_fd, writer = await pipe_writer()
        fcntl.fcntl(write_fd, fcntl.F_SETPIPE_SZ, 4096)  # a pipe that fills at once
        for frame in frames:
            writer.write(frame)
        assert writer.transport.get_write_buffer_size() > 0  # the rest waits in the transport
        while len(got) < sum(map(len, frames)):
            got.extend(pending(read_fd))
            await asyncio.sleep(0.001)
        writer.close()
        os.close(read_fd)

    LOOPS[loop](main())
    assert bytes(got) == b"".join(frames)
