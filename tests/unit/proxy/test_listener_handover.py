"""The broker's end of handing listeners to the proxy worker, per OS: the worker's start
arguments, the descriptors it inherits, and the exact calls made after its start and when a
door moves (POSIX: ``SCM_RIGHTS`` then ``proxy:adopt-door``; Windows: ``socket.share`` with the
worker's PID, base64 in ``proxy:take-listener``), against a recording worker."""

from __future__ import annotations

import base64
import os
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from backend.components.proxy.handover import (
    ADOPT_DOOR_TIMEOUT_S,
    DELIVER_TIMEOUT_S,
    DescriptorHandover,
    SharedHandover,
    for_platform,
    system_share,
)
from backend.components.proxy.listeners import RELAY, Listener, listen_tcp
from backend.protocol import errors
from backend.protocol.proxy import Door

WORKER_PID = 4242  # the process started (on Windows, maybe a venv's launcher)
OWN_PID = 4343  # the interpreter that runs the worker, as its ping says
posix_only = pytest.mark.skipif(
    not hasattr(socket, "AF_UNIX") or not hasattr(socket, "send_fds"),
    reason="descriptors are handed over on POSIX only",
)


@dataclass
class RecordingWorker:
    """A running worker that records each call and answers with ``answer`` (or raises it)."""

    running: bool = True
    answer: Any = None
    own_pid: Any = OWN_PID
    calls: list[tuple[str, Any, float]] = field(default_factory=list)

    def pid(self) -> int | None:
        return WORKER_PID if self.running else None

    async def call(self, method: str, params: Any = None, *, timeout: float = 10.0) -> Any:
        self.calls.append((method, params, timeout))
        if method == "ping":
            return {"pong": True, "version": "0", "uptime_ms": 1, "pid": self.own_pid}
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


@pytest.fixture
def listeners() -> Iterator[tuple[dict[Door, Listener], Listener]]:
    doors: dict[Door, Listener] = {
        door: Listener(door, 0, listen_tcp("127.0.0.1", 0)) for door in ("ollama", "openai")
    }
    relay = Listener(RELAY, 0, listen_tcp("127.0.0.1", 0))
    yield doors, relay
    for listener in [*doors.values(), relay]:
        listener.sock.close()


def fd(listener: Listener) -> int:
    return listener.sock.fileno()


# POSIX: inherited descriptors, SCM_RIGHTS for a door that moves.


@posix_only
def test_posix_start_names_and_passes_every_descriptor_and_the_channel(
    listeners: tuple[dict[Door, Listener], Listener],
) -> None:
    doors, relay = listeners
    handover = DescriptorHandover()
    start = handover.start(doors, relay)
    try:
        channel = int(start.argv[start.argv.index("--handover-fd") + 1])
        assert start.argv == [
            *("--fd", f"ollama={fd(doors['ollama'])}", "--fd", f"openai={fd(doors['openai'])}"),
            *("--relay-fd", str(fd(relay)), "--handover-fd", str(channel)),
        ]
        assert start.pass_fds == (fd(doors["ollama"]), fd(doors["openai"]), fd(relay), channel)
        assert not handover.delivers_after_start
    finally:
        handover.close()


async def test_posix_deliver_calls_nothing(
    listeners: tuple[dict[Door, Listener], Listener],
) -> None:
    doors, relay = listeners
    worker = RecordingWorker()
    await DescriptorHandover().deliver(worker, doors, relay)
    assert worker.calls == []


@posix_only
async def test_posix_hand_over_sends_the_socket_then_asks_the_worker_to_adopt_it(
    listeners: tuple[dict[Door, Listener], Listener],
) -> None:
    doors, relay = listeners
    handover = DescriptorHandover()
    start = handover.start(doors, relay)
    worker_end = socket.socket(fileno=start.pass_fds[-1])  # what the worker inherits
    try:
        await handover.hand_over(RecordingWorker(), "ollama", doors["ollama"])
        message, fds, _, _ = socket.recv_fds(worker_end, 64, 1)
        received = socket.socket(fileno=fds[0])
        assert message == b"ollama"
        assert received.getsockname() == doors["ollama"].sock.getsockname()
        received.close()
    finally:
        worker_end.detach()  # the handover's own end; it closes it
        handover.close()


@posix_only
async def test_posix_hand_over_calls_adopt_door_with_its_timeout(
    listeners: tuple[dict[Door, Listener], Listener],
) -> None:
    doors, relay = listeners
    handover, worker = DescriptorHandover(), RecordingWorker()
    handover.start(doors, relay)
    try:
        await handover.hand_over(worker, "openai", doors["openai"])
    finally:
        handover.close()
    assert worker.calls == [("proxy:adopt-door", {"door": "openai"}, ADOPT_DOOR_TIMEOUT_S)]


async def test_posix_hand_over_without_a_started_worker_is_unavailable(
    listeners: tuple[dict[Door, Listener], Listener],
) -> None:
    doors, _ = listeners
    worker = RecordingWorker()
    with pytest.raises(errors.Unavailable):
        await DescriptorHandover().hand_over(worker, "ollama", doors["ollama"])
    assert worker.calls == []


@posix_only
def test_posix_close_closes_both_ends_and_a_new_start_opens_a_new_channel(
    listeners: tuple[dict[Door, Listener], Listener],
) -> None:
    doors, relay = listeners
    handover = DescriptorHandover()
    handover.start(doors, relay)
    first = handover._channel
    handover.start(doors, relay)
    second = handover._channel
    assert first is not None and all(end.fileno() == -1 for end in first), "the old pair closed"
    assert second is not None and all(end.fileno() != -1 for end in second)
    handover.close()
    assert all(end.fileno() == -1 for end in second)


# Windows: names at the start, then each socket shared with the worker's PID over its RPC.


@dataclass
class RecordingShare:
    """``socket.share`` stand-in: records (socket, pid) and returns bytes naming the socket."""

    shared: list[tuple[int, int]] = field(default_factory=list)
    error: OSError | None = None

    def __call__(self, sock: socket.socket, pid: int) -> bytes:
        if self.error is not None:
            raise self.error
        self.shared.append((sock.fileno(), pid))
        return f"shared:{sock.fileno()}".encode()


def encoded(listener: Listener) -> str:
    return base64.b64encode(f"shared:{fd(listener)}".encode()).decode()


def test_windows_start_names_every_listener_and_passes_no_descriptor(
    listeners: tuple[dict[Door, Listener], Listener],
) -> None:
    doors, relay = listeners
    handover = SharedHandover(RecordingShare())
    start = handover.start(doors, relay)
    assert start.argv == ["--shared", "ollama", "--shared", "openai", "--shared", "relay"]
    assert start.pass_fds == ()
    assert handover.delivers_after_start
    assert handover.start(doors, None).argv == ["--shared", "ollama", "--shared", "openai"]


async def test_windows_deliver_shares_each_listener_with_the_worker_doors_first(
    listeners: tuple[dict[Door, Listener], Listener],
) -> None:
    doors, relay = listeners
    share, worker = RecordingShare(), RecordingWorker()
    await SharedHandover(share).deliver(worker, doors, relay)
    assert share.shared == [
        (fd(doors["ollama"]), OWN_PID),
        (fd(doors["openai"]), OWN_PID),
        (fd(relay), OWN_PID),
    ]
    assert worker.calls == [("ping", None, DELIVER_TIMEOUT_S)] + [
        ("proxy:take-listener", {"listener": name, "shared": encoded(listener)}, DELIVER_TIMEOUT_S)
        for name, listener in [*doors.items(), (RELAY, relay)]
    ]


async def test_windows_hand_over_shares_the_new_socket_the_same_way(
    listeners: tuple[dict[Door, Listener], Listener],
) -> None:
    doors, _ = listeners
    share, worker = RecordingShare(), RecordingWorker()
    await SharedHandover(share).hand_over(worker, "openai", doors["openai"])
    assert share.shared == [(fd(doors["openai"]), OWN_PID)]
    params = {"listener": "openai", "shared": encoded(doors["openai"])}
    assert worker.calls == [
        ("ping", None, ADOPT_DOOR_TIMEOUT_S),
        ("proxy:take-listener", params, ADOPT_DOOR_TIMEOUT_S),
    ]


async def test_windows_nothing_is_shared_without_a_running_worker(
    listeners: tuple[dict[Door, Listener], Listener],
) -> None:
    doors, relay = listeners
    share, worker = RecordingShare(), RecordingWorker(running=False)
    with pytest.raises(errors.Unavailable, match="not running"):
        await SharedHandover(share).deliver(worker, doors, relay)
    assert share.shared == [] and worker.calls == []


async def test_windows_a_share_the_system_refuses_is_unavailable_and_calls_nothing(
    listeners: tuple[dict[Door, Listener], Listener],
) -> None:
    doors, _ = listeners
    share = RecordingShare(error=OSError(10022, "WSAEINVAL"))
    worker = RecordingWorker()
    with pytest.raises(errors.Unavailable, match="ollama listener could not be shared"):
        await SharedHandover(share).hand_over(worker, "ollama", doors["ollama"])
    assert [call[0] for call in worker.calls] == ["ping"]


async def test_windows_a_worker_that_does_not_answer_fails_the_delivery(
    listeners: tuple[dict[Door, Listener], Listener],
) -> None:
    doors, relay = listeners
    worker = RecordingWorker(answer=errors.CallTimeout("no answer"))
    with pytest.raises(errors.CallTimeout):
        await SharedHandover(RecordingShare()).deliver(worker, doors, relay)
    assert len(worker.calls) == 2, "the delivery stops at the first listener not taken"


@pytest.mark.parametrize("said", [None, "4343", True, 0, -1])
async def test_windows_a_worker_that_gives_no_process_id_gets_nothing_shared(
    listeners: tuple[dict[Door, Listener], Listener], said: Any
) -> None:
    doors, relay = listeners
    share, worker = RecordingShare(), RecordingWorker(own_pid=said)
    with pytest.raises(errors.Unavailable, match="did not give its process id"):
        await SharedHandover(share).deliver(worker, doors, relay)
    assert share.shared == [] and [call[0] for call in worker.calls] == ["ping"]


# The choice.


@pytest.mark.parametrize(
    ("platform", "kind"),
    [("win32", SharedHandover), ("linux", DescriptorHandover), ("darwin", DescriptorHandover)],
)
def test_the_platform_picks_the_handover(platform: str, kind: type) -> None:
    assert isinstance(for_platform(platform), kind)


@pytest.mark.skipif(sys.platform == "win32", reason="the real share runs there")
def test_the_real_share_is_refused_off_windows() -> None:
    with socket.socket() as sock, pytest.raises(OSError, match="Windows only"):
        system_share(sock, WORKER_PID)


@pytest.mark.skipif(sys.platform != "win32", reason="socket.share is Windows only")
def test_the_real_share_gives_bytes_that_rebuild_the_listener(
    listeners: tuple[dict[Door, Listener], Listener],
) -> None:
    doors, _ = listeners
    shared = system_share(doors["ollama"].sock, os.getpid())
    rebuilt = socket.fromshare(shared)  # type: ignore[attr-defined,unused-ignore]
    assert rebuilt.getsockname() == doors["ollama"].sock.getsockname()
    rebuilt.close()
