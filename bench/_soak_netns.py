"""The soak's network when its nodes run in namespaces (``soak.py --netns``): a bridge, one
namespace per node with an address of its own, a forwarder per front door, and link faults.

Not a benchmark itself; ``bench/_soak_cluster.py`` and ``bench/_soak_chaos.py`` use it. The
nodes reach each other over the bridge (real TCP, real addresses), so a fault on a link
(``tests/support/netfaults.py``: a blackhole route, a link set down) cuts what it would cut on
a LAN. A front door listens on its namespace's loopback (it lets its own host in without a
key), so the soak's clients, in this namespace, reach it through a forwarder: it listens on
this namespace's loopback and dials the door from a socket made inside the node's namespace.
That path never crosses the bridge, so a node cut off from the others still answers its own
clients, as a computer that lost Wi-Fi does.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
from concurrent.futures import ThreadPoolExecutor
from typing import Final

from backend.common.tasks import TaskSet
from tests.support.netfaults import (
    LinkFaults,
    join_network_namespace,
    namespaces_unavailable,
    run_ip,
)

SUBNET: Final = "10.79.1"  # apart from the test suite's and the link bench's
READ_SIZE: Final = 64 * 1024


class SoakNetwork:
    """Owns the bridge, a namespace per node, the forwarders (listening sockets and one task
    per connection) and ``faults``; ``close`` removes them all, faults undone first."""

    def __init__(self, names: tuple[str, ...]) -> None:
        tag = f"{os.getpid() % 100000:05d}"
        self.bridge = f"psb{tag}"
        self.namespaces = {name: f"psns{tag}{name}" for name in names}
        self.addresses = {name: f"{SUBNET}.{11 + i}" for i, name in enumerate(names)}
        self.faults = LinkFaults()
        self._tag = tag
        self._made: list[str] = []
        self._threads: dict[str, ThreadPoolExecutor] = {}
        self._servers: list[asyncio.Server] = []
        self._forwarded: dict[tuple[str, int], str] = {}  # a node started again keeps its ports
        self._tasks = TaskSet("soak-forwarders")

    @staticmethod
    def unavailable() -> str | None:
        """Why namespaces cannot be made here (None: they can)."""
        return namespaces_unavailable()

    def open(self) -> None:
        """Make the bridge and every node's namespace on it."""
        run_ip("ip", "link", "add", self.bridge, "type", "bridge")
        run_ip("ip", "link", "set", self.bridge, "type", "bridge", "mcast_snooping", "0")
        run_ip("ip", "link", "set", self.bridge, "up")
        for index, (name, namespace) in enumerate(self.namespaces.items()):
            outer, inner = f"psh{self._tag}{index}", f"psn{self._tag}{index}"
            run_ip("ip", "netns", "add", namespace)
            self._made.append(namespace)
            run_ip("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
            run_ip("ip", "link", "set", inner, "netns", namespace)
            run_ip("ip", "link", "set", outer, "master", self.bridge)
            run_ip("ip", "link", "set", outer, "up")
            run_ip("ip", "-n", namespace, "link", "set", inner, "name", "eth0")
            run_ip(
                "ip", "-n", namespace, "addr", "add", f"{self.addresses[name]}/24", "dev", "eth0"
            )
            for device in ("eth0", "lo"):
                run_ip("ip", "-n", namespace, "link", "set", device, "up")

    def prefix(self, name: str) -> list[str]:
        """The argv prefix that runs a command in node ``name``'s namespace."""
        return ["ip", "netns", "exec", self.namespaces[name]]

    async def forward(self, name: str, port: int) -> str:
        """A base URL here that reaches ``127.0.0.1:port`` in node ``name``'s namespace."""
        if (name, port) in self._forwarded:
            return self._forwarded[name, port]
        dialler = self._threads.get(name)
        if dialler is None:
            dialler = ThreadPoolExecutor(
                1, f"soak-netns-{name}", join_network_namespace, (self.namespaces[name],)
            )
            self._threads[name] = dialler

        async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = self._tasks.spawn(self._pipe(dialler, port, reader, writer), name="soak:pipe")
            await asyncio.wait({task})  # asyncio's stream server runs this as a task of its own

        server = await asyncio.start_server(accepted, "127.0.0.1", 0)
        self._servers.append(server)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        self._forwarded[name, port] = url
        return url

    async def _pipe(
        self,
        dialler: ThreadPoolExecutor,
        port: int,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        loop = asyncio.get_running_loop()
        inside = await loop.run_in_executor(dialler, _socket_here)
        try:
            await loop.sock_connect(inside, ("127.0.0.1", port))
            up_reader, up_writer = await asyncio.open_connection(sock=inside)
        except OSError:
            inside.close()
            writer.transport.abort()  # as a refused connection looks from behind a proxy
            return
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(_copy(reader, up_writer), name="soak:pipe-up")
                group.create_task(_copy(up_reader, writer), name="soak:pipe-down")
        finally:
            for side in (writer, up_writer):
                side.close()

    async def close(self) -> None:
        """Undo every fault, stop the forwarders, remove the namespaces and the bridge."""
        self.faults.restore_all()
        for server in self._servers:
            server.close()
        await self._tasks.close()
        for dialler in self._threads.values():
            dialler.shutdown(wait=False)
        await asyncio.to_thread(self._remove)

    def _remove(self) -> None:
        for namespace in self._made:
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True, timeout=10)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, timeout=10)


def _socket_here() -> socket.socket:
    """A non-blocking TCP socket in the calling thread's namespace."""
    made = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    made.setblocking(False)
    return made


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Every byte from ``reader`` to ``writer``, then a FIN (or an abort, on an error)."""
    try:
        while data := await reader.read(READ_SIZE):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except OSError:
        writer.transport.abort()
    finally:
        with contextlib.suppress(OSError):
            await writer.drain()
