"""Real broker subprocesses on free ports with temporary data dirs, stopped by PID."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import pytest

from backend.protocol import contract, methods
from backend.protocol.contract import Method, Push
from backend.protocol.endpoint import control_address, open_control_connection
from backend.protocol.peer import RpcPeer
from backend.protocol.types.cluster import InviteAnswer, InviteParams, JoinWindowParams
from tests.support.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
# What the broker logs once it serves (``backend/broker.py``).
READY_LINE = b'"msg": "broker ready'
R = TypeVar("R")


@contextlib.contextmanager
def serve_folder(folder: Path, address: str = "127.0.0.1") -> Iterator[str]:
    """A plain HTTP server (a real socket, our own process) serving ``folder`` at ``address``;
    yields its base URL, stops it by PID afterwards."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", address,
         "--directory", str(folder)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://{address}:{port}"
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(url + "/", timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        yield url
    finally:
        server.terminate()
        server.wait(10)


def node_argv(data_dir: Path, *extra: str) -> list[str]:
    """``pair node`` with every listener on a free port."""
    return [
        sys.executable,
        "-m",
        "backend",
        "node",
        "--data-dir",
        str(data_dir),
        "--json-logs",
        "--node-port",
        str(free_port()),
        "--ollama-port",
        str(free_port()),
        "--openai-port",
        str(free_port()),
        "--llamacpp-port",
        str(free_port()),
        "--relay-port",
        str(free_port()),
        *extra,
    ]


# Where each engine event carries its payload.
_ENGINE_PAYLOADS = {
    "state_changed": "status",
    "models_changed": "models",
    "pull_progressed": "progress",
    "install_progressed": "progress",
}


@dataclass
class Client:
    """An RPC connection to a broker that records every push it receives."""

    peer: RpcPeer
    pushes: list[tuple[str, Any]] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def call(
        self, method: Method[Any, Any] | str, params: Any = None, timeout: float = 10.0
    ) -> Any:
        """The raw result of ``method`` (a declared method, or a raw name to test the wire)."""
        name = method.name if isinstance(method, Method) else method
        if isinstance(params, msgspec.Struct):
            params = msgspec.to_builtins(params)
        return await self.peer.call(name, params, timeout=timeout)

    async def typed(self, method: Method[Any, R], params: Any = None, timeout: float = 10.0) -> R:
        """The typed result of ``method``."""
        return await contract.call(self.peer, method, params, timeout=timeout)

    def engine_events(self, tag: str, since: int = 0) -> list[Any]:
        """The payloads (status, models or progress) of the ``engine:event`` pushes tagged
        ``tag`` received so far (needs ``engine:subscribe``, which ``connect`` makes)."""
        return [
            params[_ENGINE_PAYLOADS[tag]]
            for name, params in self.pushes[since:]
            if name == methods.ENGINE_EVENT.name and params.get("event") == tag
        ]

    async def wait_engine_event(
        self,
        tag: str,
        predicate: Callable[[Any], bool] = lambda _: True,
        timeout: float = 10.0,
        since: int = 0,
    ) -> Any:
        """The payload of the first ``engine:event`` tagged ``tag`` that satisfies ``predicate``."""
        field = _ENGINE_PAYLOADS[tag]
        event = await self.wait_push(
            methods.ENGINE_EVENT,
            lambda params: params.get("event") == tag and predicate(params[field]),
            timeout,
            since,
        )
        return event[field]

    async def wait_push(
        self,
        method: Push[Any] | str,
        predicate: Callable[[Any], bool] = lambda _: True,
        timeout: float = 10.0,
        since: int = 0,
    ) -> Any:
        """The first push of ``method`` (received or coming) that satisfies ``predicate``.

        ``since`` skips the pushes received before that index (``len(client.pushes)``).
        """
        seen = since
        wanted = method.name if isinstance(method, Push) else method
        async with asyncio.timeout(timeout):
            while True:
                for name, params in self.pushes[seen:]:
                    if name == wanted and predicate(params):
                        return params
                seen = len(self.pushes)
                self.arrived.clear()
                await self.arrived.wait()


async def pair_nodes(
    a_client: Client, b_client: Client, b_node_port: int, b_address: str = "127.0.0.1"
) -> None:
    """Pair A (the inviter) with B (the joiner) as a user would: B asks to join, A invites B,
    B types the PIN."""
    await b_client.typed(methods.CLUSTER_OPEN_JOIN_WINDOW, JoinWindowParams())
    created = await a_client.typed(
        methods.CLUSTER_INVITE, InviteParams(address=b_address, port=b_node_port), timeout=30
    )
    assert created.invite.state == "pending", created.invite.reason
    answer = InviteAnswer(id=created.invite.id, pin=created.pin)
    ended = await b_client.typed(methods.CLUSTER_ACCEPT, answer, timeout=30)
    assert ended.state == "paired", ended.reason


@dataclass
class Broker:
    """A broker process this test started."""

    process: subprocess.Popen[bytes]
    data_dir: Path
    stderr_path: Path

    @property
    def address(self) -> str:
        return control_address(self.data_dir)

    def logs(self) -> list[dict[str, Any]]:
        records = []
        for line in self.stderr_path.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                records.append(json.loads(line))
        return records

    @contextlib.asynccontextmanager
    async def connect(self, *, engine_events: bool = True) -> AsyncIterator[Client]:
        """A client connection; it follows the engine stream unless ``engine_events`` is off."""
        reader, writer = await open_control_connection(self.address)
        client: Client

        def on_push(method: str, params: Any, _: RpcPeer) -> None:
            client.pushes.append((method, params))
            client.arrived.set()

        client = Client(RpcPeer(reader, writer, name="test-client", on_notification=on_push))
        task = asyncio.create_task(client.peer.run())
        try:
            if engine_events:
                await client.call(methods.ENGINE_SUBSCRIBE)
            yield client
        finally:
            client.peer.close()
            await asyncio.wait_for(task, 5)

    def request_stop(self) -> None:
        """Ask it to stop (SIGTERM) without waiting for it."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def stop(self, timeout: float = 15.0) -> int:
        """Stop it and return its exit code; killed if it has not ended within ``timeout``."""
        self.request_stop()
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait(5)


def proxy_pid(status: dict[str, Any]) -> int | None:
    """The proxy worker's PID in a broker's ``status`` answer, while it runs."""
    proxy = next(c for c in status["components"] if c["name"] == "proxy")
    return int(proxy["pid"]) if proxy["status"] == "running" else None


def wait_until_serving(broker: Broker, timeout: float = 20.0) -> None:
    """Block until the broker logs that it is ready (or fail with its log).

    Reads only what the log gained since the last look, every 20 ms: the ready line comes a
    few seconds into a start, and re-parsing the whole log each time cost CPU the loaded
    machine's brokers need to start."""
    deadline = time.monotonic() + timeout
    seen, carried = 0, b""  # the last bytes read: the line may arrive in two parts
    while time.monotonic() < deadline:
        exited = broker.process.poll() is not None
        with broker.stderr_path.open("rb") as log:
            log.seek(seen)
            gained = log.read()
        seen += len(gained)
        if READY_LINE in carried + gained:
            return
        carried = (carried + gained)[-len(READY_LINE) :]
        if exited:
            raise AssertionError(f"broker exited: {broker.stderr_path.read_text()[-2000:]}")
        time.sleep(0.02)
    raise AssertionError(f"broker not ready: {broker.stderr_path.read_text()[-2000:]}")


def stop_all(brokers: Sequence[Broker], timeout: float = 15.0) -> None:
    """Stop ``brokers`` together: each is asked to stop first, then each is waited for, so
    their shutdowns overlap instead of adding up."""
    for broker in brokers:
        broker.request_stop()
    for broker in brokers:
        broker.stop(timeout)


def launch_broker(data_dir: Path, stderr_path: Path, *extra: str) -> Broker:
    """A ``pair node`` on ``data_dir`` (plus ``extra`` flags) started, not yet serving; its
    stderr goes to ``stderr_path``. In a session of its own, as the app starts one: on Linux
    its worker and engines then share its scheduling group (``backend/core/lifetime/posix.py``)
    rather than the test run's, which the suite's own workers keep busy."""
    with stderr_path.open("wb") as stderr:
        process = subprocess.Popen(
            node_argv(data_dir, *extra),
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=dict(os.environ),
            start_new_session=sys.platform != "win32",
        )
    return Broker(process, data_dir, stderr_path)


@contextlib.contextmanager
def serving_broker(folder: Path, *extra: str) -> Iterator[Broker]:
    """A broker on ``folder / "node"``, serving, for a module's tests to share; stopped after."""
    broker = launch_broker(folder / "node", folder / "broker.stderr", *extra)
    try:
        wait_until_serving(broker)
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def start_broker(tmp_path: Path) -> Iterator[Callable[..., Broker]]:
    """Start brokers (each with its own data dir unless given); all are stopped afterwards."""
    started: list[Broker] = []

    def start(*extra: str, data_dir: Path | None = None, wait: bool = True) -> Broker:
        """One broker; ``wait`` False returns it started, not yet serving (start several that
        way and ``wait_until_serving`` each: their starts overlap)."""
        directory = data_dir or tmp_path / f"node{len(started)}"
        broker = launch_broker(directory, tmp_path / f"broker{len(started)}.stderr", *extra)
        started.append(broker)
        if wait:
            wait_until_serving(broker)
        return broker

    yield start
    stop_all(started)
