"""The proxy worker's listening sockets, however they reach it, and the sites serving them.

A listener (a front door or the relay) reaches the worker one of three ways: inherited as a
descriptor at its start (``--fd``, ``--relay-fd``; POSIX), sent over the hand-over channel when
a door moves (``SCM_RIGHTS``: ``handover.py``; POSIX), or shared with the worker's PID and sent
over RPC, at its start and when a door moves (``shared.py``; Windows). A door that moves while
served starts accepting on its new socket before it stops on the old one.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable, Collection, Mapping
from typing import Any

import msgspec
from aiohttp import web

from backend.core.guarded_site import ConnectionGuard, GuardedSite
from backend.protocol import errors
from backend.protocol.proxy import (
    SHARED_RELAY,
    Door,
    DoorServed,
    ListenerTaken,
    SharedListenerName,
)
from backend.protocol.worker_methods import PROXY_ADOPT_DOOR, PROXY_TAKE_LISTENER
from backend.workers.proxy.channels.handover import open_channel, receive_door
from backend.workers.proxy.channels.shared import (
    AwaitedListeners,
    FromShare,
    shared_socket,
    system_fromshare,
)

log = logging.getLogger(__name__)


class ServedListeners:
    """Owns the listening descriptors (``fds``: each door's, ``relay_fd``), the hand-over
    channel, each door's runner and current site, and every started site (``sites``, stopped
    when the broker closes the listeners). ``lock`` is held while the doors start or one moves.
    ``guard`` gives a listener's connection guard; ``closing`` says the broker closed them.
    """

    def __init__(
        self,
        fds: Mapping[Door, int],
        *,
        guard: Callable[[str], ConnectionGuard],
        closing: Callable[[], bool],
        relay_fd: int | None = None,
        handover_fd: int | None = None,
        shared: Collection[SharedListenerName] = (),
        fromshare: FromShare = system_fromshare,
    ) -> None:
        self.fds = dict(fds)
        self.relay_fd = relay_fd
        self.runners: dict[Door, web.AppRunner] = {}
        self.door_sites: dict[Door, web.SockSite] = {}
        self.sites: list[web.SockSite] = []
        self.lock = asyncio.Lock()
        self._guard = guard
        self._closing = closing
        self._handover = open_channel(handover_fd)
        self._awaited = AwaitedListeners(shared)  # the ones the broker shares after our start
        self._fromshare = fromshare

    async def wait_complete(self) -> None:
        """Return once every listener this worker was started without has arrived."""
        await self._awaited.wait_complete()

    async def adopt_door(self, params: Any) -> Any:
        """``proxy:adopt-door``: serve a door on the socket the broker just handed over, then
        stop accepting on its old one (requests in flight there go on)."""
        door = PROXY_ADOPT_DOOR.convert_params(params).door
        if self._handover is None or self._closing():
            raise errors.Unavailable("this proxy worker takes no door hand-overs now")
        async with self.lock:
            port = await self._adopt(door, receive_door(self._handover, door))
        return msgspec.to_builtins(DoorServed(door=door, port=port))

    async def take_listener(self, params: Any) -> Any:
        """``proxy:take-listener``: a listener shared with us. The first socket of one we were
        started without completes our set; a door's later one is adopted as a hand-over."""
        taken = PROXY_TAKE_LISTENER.convert_params(params)
        name = taken.listener
        if self._closing():
            raise errors.Unavailable("this proxy worker takes no listeners now")
        sock = shared_socket(taken.shared, self._fromshare)
        async with self.lock:
            if self._awaited.awaited(name):
                port = int(sock.getsockname()[1])
                if name == SHARED_RELAY:
                    self.relay_fd = sock.detach()
                else:
                    self.fds[name] = sock.detach()
                self._awaited.arrived(name)
            elif name == SHARED_RELAY:
                sock.close()
                raise errors.InvalidParams("Invalid params: the relay was handed over already")
            else:
                port = await self._adopt(name, sock)
        return msgspec.to_builtins(ListenerTaken(listener=name, port=port))

    async def _adopt(self, door: Door, sock: socket.socket) -> int:
        """Serve ``door`` on ``sock`` from now on, then stop accepting on its old socket;
        the new port. Called with ``lock`` held."""
        if door not in self.fds:
            sock.close()
            raise errors.InvalidParams(f"Invalid params: this worker serves no {door} door")
        port = int(sock.getsockname()[1])
        runner = self.runners.get(door)
        if runner is None:  # not serving yet: the door will start on the new socket
            socket.close(self.fds[door])
            self.fds[door] = sock.detach()
        else:
            site = GuardedSite(runner, sock, self._guard(f"front door {door}"))
            await site.start()
            old, self.door_sites[door] = self.door_sites[door], site
            self.sites = [site if s is old else s for s in self.sites]
            await old.stop()
        log.info("front door %s now accepts on port %d", door, port)
        return port
