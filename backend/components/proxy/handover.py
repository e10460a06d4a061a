"""Handing the broker's listening sockets to the proxy worker: one contract, one implementation
per way an OS lets a socket cross into another process, chosen in ``for_platform``.

POSIX (``DescriptorHandover``): the worker inherits each listener as a descriptor at its start
(``pass_fds``, named by ``--fd DOOR=N`` and ``--relay-fd N``); a door that moves later is sent
over a Unix socket pair (``SCM_RIGHTS``, ``--handover-fd``) before ``proxy:adopt-door``.

Windows (``SharedHandover``): no descriptor is inherited (``pass_fds`` is refused) and there is
neither ``AF_UNIX`` nor ``SCM_RIGHTS``. The worker is started with ``--shared NAME`` for each
listener; once its PID is known, each socket is shared with that process (``socket.share``,
which duplicates it there) and the bytes go in ``proxy:take-listener`` on the worker's stdio
RPC, at the start and whenever a door moves. The worker serves no door before it has all of
them, and the broker counts it ready only once each was answered (``deliver``).
"""

from __future__ import annotations

import base64
import socket
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from backend.components.proxy.listeners import RELAY, Listener, send_door
from backend.protocol import errors
from backend.protocol.methods import PING
from backend.protocol.proxy import Door, DoorHandover, SharedListener, SharedListenerName
from backend.protocol.worker_methods import PROXY_ADOPT_DOOR, PROXY_TAKE_LISTENER

# A worker that is still starting answers a hand-over once it runs (about a second).
ADOPT_DOOR_TIMEOUT_S = 10.0
# The listeners shared at a worker's start wait for its imports and its RPC loop: longer on a
# slow disk, and the broker's readiness waits for them anyway.
DELIVER_TIMEOUT_S = 30.0

Share = Callable[[socket.socket, int], bytes]


class WorkerLink(Protocol):
    """The running proxy worker, as a hand-over needs it (``WorkerProcess``)."""

    def pid(self) -> int | None:
        """Its PID while it runs."""
        ...

    async def call(self, method: str, params: Any = None, *, timeout: float = 10.0) -> Any:
        """Call it; raises ``RpcError``."""
        ...


class WorkerStart(msgspec.Struct, frozen=True):
    """What a worker's start carries for its listeners: arguments after ``pair worker proxy``
    and the descriptors it inherits."""

    argv: list[str]
    pass_fds: tuple[int, ...] = ()


class ListenerHandover(Protocol):
    """How the broker hands its listeners to each proxy worker it starts."""

    @property
    def delivers_after_start(self) -> bool:
        """Whether ``deliver`` has anything to do (the component then awaits it before the
        worker counts as ready)."""
        ...

    def start(self, doors: Mapping[Door, Listener], relay: Listener | None) -> WorkerStart:
        """The start of a new worker that serves ``doors`` and ``relay``."""
        ...

    async def deliver(
        self, worker: WorkerLink, doors: Mapping[Door, Listener], relay: Listener | None
    ) -> None:
        """Right after the start, the listeners the start could not carry; raises
        ``RpcError`` when the worker did not take one (it cannot serve: restart it)."""
        ...

    async def hand_over(self, worker: WorkerLink, door: Door, listener: Listener) -> None:
        """Have the running worker serve ``door`` on ``listener`` from now on; raises
        ``RpcError`` when it did not answer that it does."""
        ...

    def close(self) -> None:
        """The worker is gone: let go of what its start opened."""
        ...


@dataclass
class DescriptorHandover:
    """POSIX: inherited descriptors, and ``SCM_RIGHTS`` for a door that moves."""

    _channel: tuple[socket.socket, socket.socket] | None = field(default=None, init=False)

    @property
    def delivers_after_start(self) -> bool:
        """False: the start carries every listener."""
        return False

    def start(self, doors: Mapping[Door, Listener], relay: Listener | None) -> WorkerStart:
        """``--fd DOOR=N`` per door, ``--relay-fd N``, and a new socket pair whose worker end
        is ``--handover-fd N``; every one of those descriptors inherited."""
        self.close()
        argv: list[str] = []
        for door, listener in doors.items():
            argv += ["--fd", f"{door}={listener.sock.fileno()}"]
        listeners = [*doors.values()]
        if relay is not None:
            argv += ["--relay-fd", str(relay.sock.fileno())]
            listeners.append(relay)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._channel = (ours, theirs)
        argv += ["--handover-fd", str(theirs.fileno())]
        passed = (*(listener.sock.fileno() for listener in listeners), theirs.fileno())
        return WorkerStart(argv, passed)

    async def deliver(
        self, worker: WorkerLink, doors: Mapping[Door, Listener], relay: Listener | None
    ) -> None:
        """Nothing: the worker inherited them."""

    async def hand_over(self, worker: WorkerLink, door: Door, listener: Listener) -> None:
        """The socket over the channel (the door's name as the message), then
        ``proxy:adopt-door``, which the worker answers once it accepts there."""
        if self._channel is None:
            raise errors.Unavailable("the proxy worker has no hand-over channel")
        send_door(self._channel[0], listener)
        params = PROXY_ADOPT_DOOR.encode_params(DoorHandover(door=door))
        await worker.call(PROXY_ADOPT_DOOR.name, params, timeout=ADOPT_DOOR_TIMEOUT_S)

    def close(self) -> None:
        """Close both ends of the channel."""
        channel, self._channel = self._channel, None
        for end in channel or ():
            end.close()


def system_share(sock: socket.socket, pid: int) -> bytes:
    """``sock.share(pid)``, which only Windows has."""
    if sys.platform == "win32":
        return sock.share(pid)
    raise OSError("socket.share is Windows only")


@dataclass(frozen=True)
class SharedHandover:
    """Windows: every listener shared with the worker's own PID (as its ``ping`` gives it) and
    sent over its RPC channel."""

    share: Share = field(default=system_share, repr=False)

    @property
    def delivers_after_start(self) -> bool:
        """True: the start carries names only."""
        return True

    def start(self, doors: Mapping[Door, Listener], relay: Listener | None) -> WorkerStart:
        """``--shared NAME`` per listener; nothing inherited."""
        names: list[SharedListenerName] = [*doors, *([RELAY] if relay is not None else [])]
        return WorkerStart([arg for name in names for arg in ("--shared", name)])

    async def deliver(
        self, worker: WorkerLink, doors: Mapping[Door, Listener], relay: Listener | None
    ) -> None:
        """Each listener in turn, the doors first."""
        pid = await self._own_pid(worker, DELIVER_TIMEOUT_S)
        for door, listener in doors.items():
            await self._send(worker, pid, door, listener, DELIVER_TIMEOUT_S)
        if relay is not None:
            await self._send(worker, pid, RELAY, relay, DELIVER_TIMEOUT_S)

    async def hand_over(self, worker: WorkerLink, door: Door, listener: Listener) -> None:
        """The door's new socket, shared the same way."""
        pid = await self._own_pid(worker, ADOPT_DOOR_TIMEOUT_S)
        await self._send(worker, pid, door, listener, ADOPT_DOOR_TIMEOUT_S)

    def close(self) -> None:
        """Nothing: a shared socket belongs to the worker, and went with it."""

    @staticmethod
    async def _own_pid(worker: WorkerLink, timeout: float) -> int:
        """The PID the worker gives for itself (its ``ping`` answer). Not the one it was started
        as: from a source checkout, a venv's ``python.exe`` on Windows is a launcher that runs
        the real interpreter as its child, and a socket shared with the launcher cannot be
        rebuilt by the worker."""
        if worker.pid() is None:
            raise errors.Unavailable("the proxy worker is not running")
        answer = await worker.call(PING.name, timeout=timeout)
        pid = answer.get("pid") if isinstance(answer, dict) else None
        if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
            raise errors.Unavailable(f"the proxy worker did not give its process id: {answer!r}")
        return pid

    async def _send(
        self,
        worker: WorkerLink,
        pid: int,
        name: SharedListenerName,
        listener: Listener,
        timeout: float,
    ) -> None:
        try:
            shared = self.share(listener.sock, pid)
        except OSError as exc:  # the worker exited meanwhile, or the socket closed
            raise errors.Unavailable(f"the {name} listener could not be shared: {exc}") from None
        payload = SharedListener(listener=name, shared=base64.b64encode(shared).decode("ascii"))
        params = PROXY_TAKE_LISTENER.encode_params(payload)
        await worker.call(PROXY_TAKE_LISTENER.name, params, timeout=timeout)


def for_platform(platform: str, *, share: Share = system_share) -> ListenerHandover:
    """The hand-over for ``platform`` (a ``sys.platform`` value): shared sockets on Windows,
    descriptors everywhere else."""
    if platform == "win32":
        return SharedHandover(share)
    return DescriptorHandover()


def listener_handover() -> ListenerHandover:
    """This OS's hand-over."""
    return for_platform(sys.platform)
