"""The JSON-RPC channel over this process's stdin and stdout.

stdout must carry only frames: the real stdout descriptor is kept for frames and descriptor 1
is pointed at stderr, so a stray ``print`` from any library cannot corrupt the channel.
"""

from __future__ import annotations

import asyncio
import os
import sys


async def open_stdio_channel() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Reader over stdin and writer over the original stdout."""
    loop = asyncio.get_running_loop()
    frames_fd = os.dup(sys.stdout.fileno())
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    reader = asyncio.StreamReader(limit=2**16)
    await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader),
        os.fdopen(sys.stdin.fileno(), "rb", 0, closefd=False),
    )
    frames = os.fdopen(frames_fd, "wb", 0)
    transport, protocol = await loop.connect_write_pipe(
        lambda: asyncio.streams.FlowControlMixin(loop), frames
    )
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    return reader, writer
