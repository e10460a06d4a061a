"""The broker's composition root: holds the data dir for the run, builds the node, serves its
clients and shuts down in stages."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Callable, Sequence
from pathlib import Path

from backend import __version__
from backend.common.fd_limit import raise_open_file_limit
from backend.components.cluster.members import Members, Membership, MemberStore
from backend.components.identity.certificate import (
    IDENTITY_DIR,
    OS_KEYRING,
    IdentityKeyMissing,
    PasswordVault,
    load_or_mint,
)
from backend.components.identity.identity import load_identity
from backend.core.broker_rpc import Uptime
from backend.core.clock import Clock, SystemClock
from backend.core.instance import BrokerRecord, InstanceLock
from backend.core.loop_errors import install_accept_error_log
from backend.core.runs import RunId, RunLedger
from backend.core.shutdown import Stage, run_stages
from backend.core.stdio import open_stdio_channel
from backend.core.store import Store
from backend.protocol.endpoint import control_address
from backend.protocol.peer import RpcPeer
from backend.protocol.proxy import door_rank
from backend.wiring import BrokerConfig, Foundation, Node, WorkerSpec, build_node

log = logging.getLogger(__name__)

SHUTDOWN_BUDGET = 10.0
# The identity verdicts after which this start minted the node id (so a certificate is minted).
FRESH_IDENTITIES = ("first-run", "copied-from-another-computer", "copied-on-this-computer")
READY_TIMEOUT = 10.0


class Broker:
    """One node's broker process. Owns the data dir's instance lock and the store for the run,
    the node built on them (``backend.wiring``), the stdio client and the signal handlers.

    ``extra_workers`` are more worker processes to supervise, chosen by the caller.
    """

    def __init__(
        self,
        config: BrokerConfig,
        *,
        extra_workers: Sequence[WorkerSpec] = (),
        clock: Clock | None = None,
        vault: PasswordVault = OS_KEYRING,
    ) -> None:
        self._config = config
        self._vault = vault
        self._extra_workers = tuple(extra_workers)
        self._clock = clock or SystemClock()
        self._started_wall = self._clock.wall()
        self._uptime = Uptime(self._clock, self._clock.monotonic())
        self._address = control_address(config.data_dir)
        self._lock = InstanceLock(config.data_dir)
        self._store = Store(config.data_dir / "pair.db")
        self._ledger = RunLedger(self._store, self._clock)
        self._shutdown = asyncio.Event()

    async def run(self, announce: Callable[[str], None] | None = None) -> int:
        """Serve until asked to stop; raises ``AlreadyRunning`` if the data dir is taken."""
        # Held connections must not starve the listeners of descriptors, and running out
        # anyway must not flood the log (``fd_limit``, ``loop_errors``).
        raise_open_file_limit()
        install_accept_error_log(log)
        self._lock.acquire(
            BrokerRecord(os.getpid(), self._started_wall, self._address, __version__)
        )
        try:
            await self._store.open()
            try:
                return await self._serve(announce)
            finally:
                await self._store.close()
        finally:
            self._lock.release()

    async def _serve(self, announce: Callable[[str], None] | None) -> int:
        identity = await load_identity(self._store, self._config.data_dir, clock=self._clock)
        fresh = identity.verdict in FRESH_IDENTITIES
        members = Members(MemberStore(self._store))
        await members.open()
        _refuse_lost_identity(self._config.data_dir, fresh=fresh, membership=members.current)
        credentials = await asyncio.to_thread(
            load_or_mint,
            self._config.data_dir,
            identity.node_id,
            first_run=fresh,
            vault=self._vault,
        )
        run = await self._ledger.record_start(
            pid=os.getpid(), version=__version__, started_at=self._started_wall
        )
        node = build_node(
            Foundation(
                config=self._config,
                extra_workers=self._extra_workers,
                store=self._store,
                identity=identity,
                credentials=credentials,
                members=members,
                clock=self._clock,
                started_at=self._started_wall,
                uptime_ms=self._uptime,
                control_address=self._address,
                request_shutdown=self._shutdown.set,
            )
        )
        self._install_signal_handlers()
        async with asyncio.TaskGroup() as group:
            if self._config.stdio:
                group.create_task(self._serve_stdio(node), name="broker:stdio")
            node.supervisor.start()
            await self._become_ready(node, announce)
            await self._shutdown.wait()
            await run_stages(self._shutdown_stages(node, run), budget=SHUTDOWN_BUDGET)
        return 0

    async def _become_ready(self, node: Node, announce: Callable[[str], None] | None) -> None:
        await node.supervisor.wait_started(READY_TIMEOUT)
        node.readiness.mark_ready()
        log.info("broker ready (pid %d, control socket %s)", os.getpid(), self._address)
        if announce is not None:
            announce(self._describe_endpoints(node))

    async def _serve_stdio(self, node: Node) -> None:
        reader, writer = await open_stdio_channel()
        peer = RpcPeer(reader, writer, name="stdio", on_request=node.dispatcher)
        node.hub.add(peer)
        try:
            node.readiness.greet(peer)
            await peer.run()
        finally:
            node.hub.remove(peer)
            if not self._shutdown.is_set():
                log.info("stdin closed: shutting down")
                self._shutdown.set()

    def _shutdown_stages(self, node: Node, run: RunId) -> list[Stage]:
        # The front doors close first and owned engines stop before the components do.
        return [
            Stage("front doors", 1.0, node.proxy.close_front_doors),
            Stage("engines", 5.0, node.engines.prepare_shutdown),
            Stage("rpc-server", 2.0, node.rpc_server.close),
            Stage("components", 4.0, lambda: node.supervisor.stop(grace=2.0)),
            Stage("clients", 1.0, lambda: node.hub.close_all(timeout=1.0)),
            Stage("store", 2.0, lambda: self._ledger.record_stop(run)),
        ]

    def _install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(signum, self._on_signal, signum)

    def _on_signal(self, signum: int) -> None:
        log.info("received %s: shutting down", signal.Signals(signum).name)
        self._shutdown.set()

    def _describe_endpoints(self, node: Node) -> str:
        ports = self._config.ports
        lines = [
            f"PAIR node {__version__} is running (pid {os.getpid()}, node {node.node_name()})",
            f"  data dir        {self._config.data_dir}",
            f"  control socket  {self._address}   (pair status --data-dir ... attaches here)",
            f"  log file        {self._config.log_file or 'stderr only'}",
            f"  node API        {_node_api(node, ports.node)}",
            f"  front doors     {_front_doors(node)}",
            "  engines         `pair engines`, `pair engine start NAME`",
            "Stop with Ctrl+C or `pair stop`.",
        ]
        return "\n".join(lines)


def _refuse_lost_identity(data_dir: Path, *, fresh: bool, membership: Membership) -> None:
    """A paired node whose certificate and key are gone must not quietly become someone new:
    its members pin the old certificate. (An unpaired one just gets a new certificate.)"""
    directory = data_dir / IDENTITY_DIR
    if fresh or directory.exists() or not membership.members:
        return
    raise IdentityKeyMissing(
        f"this node is paired with {len(membership.members)} other computer(s), but its "
        f"certificate and key are missing from {directory}; restore that folder from a backup, "
        f"or remove {data_dir / 'pair.db'} to start as a new node that pairs again",
        directory,
    )


# The component name of the node API server (``components/nodeinfo/server.py``).
_NODE_API = "node-api"


def _node_api(node: Node, port: int) -> str:
    """The node API's banner line: where it listens, or that it failed (never a listener that
    is not there: pairing with this node would fail without a word)."""
    info = next((c for c in node.supervisor.snapshot() if c.name == _NODE_API), None)
    if info is None or info.status in ("running", "starting"):
        return f"port {port} on every address (TLS: node-info, pairing)"
    reason = info.last_error or "it is not running"
    return f"FAILED on port {port}: {reason}"


def _front_doors(node: Node) -> str:
    doors = node.proxy.endpoints()
    if not doors:
        return "not open yet (`pair status` shows them)"
    return ", ".join(f"{door} {doors[door]}" for door in sorted(doors, key=door_rank))
