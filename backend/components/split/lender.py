"""This computer's ``rpc-server``: started when a member's RPC tunnel needs it, bound to loopback
only, stopped once no tunnel has used it for a while and when the broker stops.

``rpc-server`` has no authentication, so it listens on 127.0.0.1 and the node API's tunnel is the
one way in. It is started like an engine (``EngineProcess``: its own process group, killed with
the broker on Linux, recorded in the engine ledger so the next broker reaps it after a crash).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import msgspec
import psutil

from backend.common.files import ensure_private_dir
from backend.common.tasks import TaskSet
from backend.components.engines.process import EngineLog, EngineProcess, RunningProcess, Spawn
from backend.components.engines.rpc_binary import rpc_server_path
from backend.core.net import port_in_use

log = logging.getLogger(__name__)

# Long enough that a model reloading (its tunnels close, then reopen) finds rpc-server running.
IDLE_S = 60.0
# A GPU build initialises its devices before it listens.
LISTEN_TIMEOUT_S = 30.0
STOP_GRACE_S = 1.0
OUTPUT_LINES = 200
TAIL_LINES = 8
CACHE_DIR = "rpc-cache"
# The engine ledger's name for it: the next broker reaps a leftover one with the engines'.
LEDGER_NAME = "rpc-server"
_PROBE_INTERVAL_S = 0.05


class RpcServerUnavailable(Exception):
    """rpc-server cannot run on this computer now; the message says why in plain words."""


class ProcessLedger(Protocol):
    """Where started processes are recorded for a later broker to reap (``EngineLedger``)."""

    async def record_process(self, engine: str, pid: int, create_time: float) -> None:
        """A process was started."""
        ...

    async def forget_process(self, pid: int) -> None:
        """The process ended."""
        ...


class _Running(msgspec.Struct, frozen=True):
    """One started rpc-server: the process, its loopback port and its last output."""

    process: RunningProcess
    port: int
    output: EngineLog

    def tail(self) -> str:
        """Its last lines of output, on one line."""
        return " / ".join(self.output.tail(TAIL_LINES)) or "no output"


async def spawn_rpc_server(
    argv: Sequence[str], env: dict[str, str], output: EngineLog
) -> EngineProcess:
    """Start rpc-server ignoring SIGPIPE: it does not, and a host that vanishes while it
    answers (a spread's llama-server killed) would otherwise kill it with its next write."""
    return await EngineProcess.spawn(argv, env, output, ignore_sigpipe=True)


class RpcServerLender:
    """Owns this computer's ``rpc-server`` process, its watcher and idle-stop tasks.

    ``ensure()`` starts it on demand and returns its port; ``hold()``/``release()`` bracket each
    tunnel, and it is stopped ``idle_s`` after the last release (never while one holds it) and
    by ``close()`` at broker shutdown. ``llama_server`` names the llama-server PAIR detected;
    rpc-server is the file beside it (the same build: llama.cpp checks the protocol version).
    """

    def __init__(
        self,
        *,
        llama_server: Callable[[], Path | None],
        data_dir: Path,
        ledger: ProcessLedger | None = None,
        idle_s: float = IDLE_S,
        listen_timeout_s: float = LISTEN_TIMEOUT_S,
        spawn: Spawn = spawn_rpc_server,
    ) -> None:
        self._llama_server = llama_server
        self._cache_dir = data_dir / CACHE_DIR
        self._ledger = ledger
        self._idle_s = idle_s
        self._listen_timeout_s = listen_timeout_s
        self._spawn = spawn
        self._tasks = TaskSet("rpc-server")
        self._running: _Running | None = None
        self._starting: asyncio.Task[_Running | RpcServerUnavailable] | None = None
        self._idle: asyncio.Task[None] | None = None
        self._halts: set[asyncio.Task[None]] = set()
        self._holds = 0
        self._closed = False

    @property
    def pid(self) -> int | None:
        """The running rpc-server's process ID, None when none runs."""
        return self._running.process.pid if self._running is not None else None

    async def ensure(self) -> int:
        """The loopback port of a running rpc-server, started now if none runs; concurrent
        callers share one start. Raises ``RpcServerUnavailable`` saying why it cannot run."""
        if self._closed:
            raise RpcServerUnavailable("PAIR is shutting down")
        running = self._running
        if running is not None and running.process.returncode is None:
            self._count_idle_from_now()
            return running.port
        if self._starting is None:
            self._starting = self._tasks.spawn(self._start(), name="start")
        starting = self._starting
        await asyncio.wait([starting])  # the start goes on for the others if this caller leaves
        started = None if starting.cancelled() else starting.result()
        if started is None:
            raise RpcServerUnavailable("PAIR is shutting down")
        if isinstance(started, RpcServerUnavailable):
            raise RpcServerUnavailable(str(started))
        return started.port

    def hold(self) -> None:
        """A tunnel is about to use rpc-server: it is not stopped for idleness until released."""
        self._holds += 1
        self._cancel_idle()

    def release(self) -> None:
        """A tunnel ended; the idle time counts from the last one's end."""
        self._holds = max(0, self._holds - 1)
        if self._holds == 0:
            self._count_idle_from_now()

    async def close(self) -> None:
        """Stop rpc-server (and a start in progress) for good; later ``ensure()`` calls fail."""
        self._closed = True
        self._cancel_idle()
        if self._starting is not None:
            self._starting.cancel()
            await asyncio.wait([self._starting])
        if self._running is not None:
            self._retire(self._running)
        if self._halts:
            await asyncio.wait(set(self._halts))
        await self._tasks.close(timeout=STOP_GRACE_S)

    async def _start(self) -> _Running | RpcServerUnavailable:
        try:
            running = await self._launch(await self._binary())
        except RpcServerUnavailable as exc:
            log.warning("rpc-server not started: %s", exc)
            return exc
        finally:
            self._starting = None
        self._running = running
        self._tasks.spawn(self._watch(running), name=f"watch:{running.process.pid}")
        self._count_idle_from_now()
        return running

    async def _binary(self) -> Path:
        llama_server = self._llama_server()
        if llama_server is None:
            raise RpcServerUnavailable("llama.cpp is not installed on this computer")
        binary = await asyncio.to_thread(rpc_server_path, llama_server)
        if binary is None:
            raise RpcServerUnavailable(
                "llama.cpp's rpc-server is not installed on this computer (none beside "
                f"{llama_server}; reinstall llama.cpp from the Engines page)"
            )
        return binary

    async def _launch(self, binary: Path) -> _Running:
        port = _free_loopback_port()
        output = EngineLog(OUTPUT_LINES)
        argv = [str(binary), "-H", "127.0.0.1", "-p", str(port), "-c", "-t", str(_cores())]
        try:
            process = await self._spawn(argv, self._environment(), output)
        except OSError as exc:
            raise RpcServerUnavailable(
                f"{binary} could not be started ({exc.strerror or exc})"
            ) from exc
        running = _Running(process, port, output)
        try:
            if self._ledger is not None:
                await self._ledger.record_process(LEDGER_NAME, process.pid, process.create_time)
            await self._wait_listening(running)
        except BaseException:
            self._retire(running)
            raise
        log.info("rpc-server (pid %d) listens on 127.0.0.1:%d", process.pid, port)
        return running

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        # Devices numbered as NVML numbers them, which is the order node-info reports.
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        # ``-c`` keeps tensors under $LLAMA_CACHE/rpc, so a reload skips the wire.
        env["LLAMA_CACHE"] = str(ensure_private_dir(self._cache_dir))
        return env

    async def _wait_listening(self, running: _Running) -> None:
        """Until its port takes a connection; an exit or a silent port raises with its output."""
        try:
            async with asyncio.timeout(self._listen_timeout_s):
                while not await port_in_use("127.0.0.1", running.port):
                    if running.process.returncode is not None:
                        code = await running.process.wait()  # and its last output
                        raise RpcServerUnavailable(
                            f"rpc-server exited with status {code} before it listened: "
                            f"{running.tail()}"
                        )
                    await asyncio.sleep(_PROBE_INTERVAL_S)
        except TimeoutError:
            raise RpcServerUnavailable(
                f"rpc-server did not listen on 127.0.0.1:{running.port} within "
                f"{self._listen_timeout_s:.0f} s: {running.tail()}"
            ) from None

    async def _watch(self, running: _Running) -> None:
        code = await running.process.wait()
        if self._running is running:  # not stopped by us: it crashed or was killed
            self._running = None
            self._cancel_idle()
            log.warning(
                "rpc-server (pid %d) exited with status %d; the next tunnel starts a new one: %s",
                running.process.pid,
                code,
                running.tail(),
            )
        await self._forget(running.process.pid)

    def _count_idle_from_now(self) -> None:
        self._cancel_idle()
        running = self._running
        if running is None or self._holds or self._closed:
            return
        self._idle = self._tasks.spawn(self._stop_when_idle(running), name="idle")

    def _cancel_idle(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None

    async def _stop_when_idle(self, running: _Running) -> None:
        await asyncio.sleep(self._idle_s)
        self._idle = None
        if self._running is running and self._holds == 0:
            log.info("rpc-server unused for %.0f s: stopping it", self._idle_s)
            self._retire(running)

    def _retire(self, running: _Running) -> None:
        """Take ``running`` out of service and stop it in a task of its own, so no caller's
        cancellation leaves it half stopped."""
        if self._running is running:
            self._running = None
        halt = self._tasks.spawn(self._halt(running), name=f"stop:{running.process.pid}")
        self._halts.add(halt)
        halt.add_done_callback(self._halts.discard)

    async def _halt(self, running: _Running) -> None:
        code = await running.process.stop(grace=STOP_GRACE_S)
        log.info("rpc-server (pid %d) stopped (status %d)", running.process.pid, code)
        await self._forget(running.process.pid)

    async def _forget(self, pid: int) -> None:
        if self._ledger is not None:
            await self._ledger.forget_process(pid)


def _cores() -> int:
    """rpc-server's CPU device runs one thread unless told; a member lending RAM computes there."""
    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


def _free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
