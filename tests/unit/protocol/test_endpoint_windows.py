"""The control endpoint on Windows: the pipe's name per user and data dir, and the streams a
client gets over a pipe connection (the connection is a socket pair here, so this runs on any
OS)."""

from __future__ import annotations

import asyncio
import hashlib
import socket
from pathlib import Path

import pytest

from backend.protocol.endpoint import (
    ProtocolFactory,
    control_address,
    open_control_connection,
    open_pipe_connection,
    pipe_address,
)

DATA_DIR = Path("C:/Users/alice/AppData/Local/pair")
DIGEST = hashlib.sha256(str(DATA_DIR).encode()).hexdigest()[:16]


def test_the_pipe_name_holds_the_user_and_the_data_dirs_digest() -> None:
    # "broker": the app's single-instance pipe for the same data dir is pair-<user>-<digest>.
    address = control_address(DATA_DIR, sys_platform="win32", user="alice")

    assert address == rf"\\.\pipe\pair-broker-alice-{DIGEST}"
    assert control_address(DATA_DIR, sys_platform="win32", user="bob") != address
    assert control_address(Path("D:/other"), sys_platform="win32", user="alice") != address


@pytest.mark.parametrize(
    ("user", "part"),
    [
        ("alice", "alice"),
        ("Jos\u00e9 Mart\u00edn", "Jos\u00e9_Mart\u00edn"),
        ("CORP\\alice", "CORP_alice"),
        ("", "user"),
        ("a" * 100, "a" * 64),
    ],
)
def test_the_user_part_has_no_backslash_and_a_bounded_length(user: str, part: str) -> None:
    expected = rf"\\.\pipe\pair-broker-{part}-0123456789abcdef"
    assert pipe_address("0123456789abcdef", user) == expected


def test_a_user_is_found_when_none_is_given() -> None:
    address = control_address(DATA_DIR, sys_platform="win32")

    assert address.startswith("\\\\.\\pipe\\pair-broker-") and address.endswith(f"-{DIGEST}")
    assert "\\" not in address.removeprefix("\\\\.\\pipe\\")


async def test_a_pipe_connection_becomes_a_reader_and_a_writer() -> None:
    loop = asyncio.get_running_loop()
    far, near = socket.socketpair()
    connected: list[str] = []

    async def connect(
        factory: ProtocolFactory, address: str
    ) -> tuple[asyncio.BaseTransport, asyncio.BaseProtocol]:
        connected.append(address)
        return await loop.connect_accepted_socket(factory, near)

    reader, writer = await open_pipe_connection(r"\\.\pipe\pair-alice-x", connect, limit=64)
    far_reader, far_writer = await asyncio.open_connection(sock=far)
    try:
        writer.write(b"ping\n")
        await writer.drain()
        assert await asyncio.wait_for(far_reader.readline(), 5) == b"ping\n"
        far_writer.write(b"pong\n" + b"x" * 100 + b"\n")
        await far_writer.drain()
        assert await asyncio.wait_for(reader.readline(), 5) == b"pong\n"
        with pytest.raises(ValueError, match="limit"):  # the limit given is the reader's
            await asyncio.wait_for(reader.readline(), 5)
        assert connected == [r"\\.\pipe\pair-alice-x"]
    finally:
        writer.close()
        far_writer.close()
        await asyncio.gather(writer.wait_closed(), far_writer.wait_closed())


async def test_a_loop_without_pipes_is_an_os_error() -> None:
    # asyncio's selector loop (this one, off Windows) has no create_pipe_connection.
    if hasattr(asyncio.get_running_loop(), "create_pipe_connection"):
        pytest.skip("this loop has pipes")
    with pytest.raises(OSError, match="proactor event loop"):
        await open_control_connection(r"\\.\pipe\pair-alice-x", sys_platform="win32")
