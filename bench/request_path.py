"""The path of one request through the proxy worker's code, counted in files visited.

    .venv/bin/python bench/request_path.py [--resumes]

One process, one event loop, real sockets. Node A is an Ollama front door (the worker's door
app, in-process, as the unit tests build it) whose routing table lists the model ``m:latest``
only on a peer, node B (kind ``peer``: B's relay listener, B's pinned certificate). Node B is
the worker's relay app served over mutual TLS with pinned certificates (as
``tests/unit/proxy/test_relay_app.py`` sets it up); its one local engine is a
``ScriptedEngine`` (``tests/integration/proxy/scripted.py``). One non-streaming ``/api/chat``
goes to A's door and travels door -> routing -> B's relay over mutual TLS -> B's scheduler ->
B's engine, and back.

Method. One untraced request first warms everything up (imports, TLS connections, pools,
first-use caches), so first-use code is not counted. During the second request
``sys.setprofile`` records every Python function call whose code lives under
``backend/workers/proxy/``: call events only (no returns, no C calls), and a coroutine or
generator resumed after an ``await`` or ``yield`` is not a call (CPython reports resumptions as
call events too; ``--resumes`` counts them as well). Every other frame (aiohttp, asyncio, the
engine, this script) is skipped, so the sequence is the worker's own calls in the order they
happened, on both nodes and in every task (job events, the relay's started poll included).

- A *stop* is a recorded call whose file differs from the previous recorded call's file (the
  first call is a stop too): each move to another file counts once, however many calls it
  then makes there.
- *Files* is the number of distinct files among the stops.
- A *return* is a stop into a file the path had already visited (so returns = stops - files);
  the report lists the five files returned to most.

Calls are also split by node: a middleware this script adds outermost on each node's app sets
a context variable (``sender`` on A's door, ``peer`` on B's relay), which every task started
while handling the request inherits; calls in tasks started before the request are
``background``. Each node's part is counted over its own calls, in order; "door to the peer's
relay" counts the calls before B's first one (A's way out, up to the hop).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import dis
import random
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402
from aiohttp import web  # noqa: E402
from aiohttp.test_utils import TestServer  # noqa: E402
from aiohttp.typedefs import Handler, Middleware  # noqa: E402

import backend  # noqa: E402
from backend.common.certificates import NodeCredentials  # noqa: E402
from backend.components.identity.certificate import mint  # noqa: E402
from backend.components.proxy.component import identity_payload  # noqa: E402
from backend.core.clock import SystemClock  # noqa: E402
from backend.protocol.proxy import ProxyTargets, RouteTarget  # noqa: E402
from backend.protocol.types.base import NodeId  # noqa: E402
from backend.workers.proxy.channels.custody import Custody  # noqa: E402
from backend.workers.proxy.channels.jobs import JobLog  # noqa: E402
from backend.workers.proxy.context import DoorContext  # noqa: E402
from backend.workers.proxy.doors.app import build_app  # noqa: E402
from backend.workers.proxy.relay.app import build_relay_app  # noqa: E402
from backend.workers.proxy.relay.peer_tls import PeerTls, credentials_from  # noqa: E402
from backend.workers.proxy.relay.serving import PeerStarted, RelayBoard  # noqa: E402
from backend.workers.proxy.routing.dispatch import Router  # noqa: E402
from backend.workers.proxy.routing.links import Links  # noqa: E402
from backend.workers.proxy.service import retry_policy  # noqa: E402
from backend.workers.proxy.upstream.attempt import SentRequest  # noqa: E402
from backend.workers.proxy.upstream.engine_client import EngineClient  # noqa: E402
from tests.integration.proxy.scripted import ScriptedEngine, start_engine  # noqa: E402

PROXY = ROOT / "backend" / "workers" / "proxy"
MODEL = "m:latest"
NODE = contextvars.ContextVar("node", default="background")


async def worker(stack: contextlib.AsyncExitStack, node: NodeCredentials) -> DoorContext:
    """One node's routing state as the worker's ``serve`` builds it (its sessions, its relay
    board, its router, the started poll to peers), with ``node``'s identity and no broker
    behind it: job events are dropped, models are never switched. Closed by ``stack``."""
    peer_tls = PeerTls()
    peer_tls.adopt_identity(credentials_from(identity_payload(node)))
    options: dict[str, Any] = {"auto_decompress": False, "request_class": SentRequest}
    pooled = aiohttp.TCPConnector(limit=0, keepalive_timeout=30)
    session = aiohttp.ClientSession(connector=pooled, **options)
    fresh = aiohttp.TCPConnector(limit=0, force_close=True)
    retry_session = aiohttp.ClientSession(connector=fresh, **options)
    stack.push_async_callback(session.close)
    stack.push_async_callback(retry_session.close)
    board = RelayBoard()
    links = Links(
        session=session,
        retry_session=retry_session,
        engines=EngineClient(),
        peer_tls=peer_tls,
        jobs=JobLog(lambda events: None),
        custody=Custody(None),
        load_model=_no_switch,
        on_started=board.started,
        on_scheduler_change=lambda: None,
        peer_started=PeerStarted(session, peer_tls),
    )
    router = Router(links, clock=SystemClock(), rng=random.Random(0), policy=retry_policy({}))
    stack.push_async_callback(router.close)
    return DoorContext("ollama", router, board)


async def _no_switch(engine: str, model: str) -> int:
    raise RuntimeError(f"{engine} cannot switch to {model} here")


@dataclass(frozen=True, slots=True)
class Call:
    """One recorded call: its file (relative to the worker), function and node."""

    file: str
    function: str
    node: str


class Recorder:
    """The profile hook: keeps the calls whose code lives under ``PROXY``."""

    def __init__(self, *, resumes: bool) -> None:
        self.calls: list[Call] = []
        self._resumes = resumes
        self._prefix = str(PROXY) + "/"
        self._starts: dict[CodeType, int] = {}

    def __call__(self, frame: FrameType, event: str, arg: object) -> None:
        if event != "call":
            return
        code = frame.f_code
        if not code.co_filename.startswith(self._prefix):
            return
        if not self._resumes and frame.f_lasti > self._start_of(code):
            return  # a coroutine or generator resumed, not called
        file = code.co_filename[len(self._prefix) :]
        self.calls.append(Call(file, code.co_qualname, NODE.get()))

    def _start_of(self, code: CodeType) -> int:
        # A fresh call is reported at or before the frame's first RESUME; a resumption after
        # the RESUME that follows its await or yield.
        start = self._starts.get(code)
        if start is None:
            start = next(i.offset for i in dis.get_instructions(code) if i.opname == "RESUME")
            self._starts[code] = start
        return start


@dataclass(frozen=True, slots=True)
class Stop:
    """Consecutive calls in one file."""

    file: str
    node: str
    functions: tuple[str, ...]


def stops_of(calls: Sequence[Call]) -> list[Stop]:
    """The calls grouped into stops: a new stop whenever the file changes."""
    stops: list[Stop] = []
    for call in calls:
        if stops and stops[-1].file == call.file:
            last = stops[-1]
            if call.function not in last.functions:
                stops[-1] = Stop(last.file, last.node, (*last.functions, call.function))
        else:
            stops.append(Stop(call.file, call.node, (call.function,)))
    return stops


def returns_of(stops: Sequence[Stop]) -> Counter[str]:
    """Per file, how many stops came back to it after the path had left it."""
    seen: set[str] = set()
    returns: Counter[str] = Counter()
    for stop in stops:
        if stop.file in seen:
            returns[stop.file] += 1
        seen.add(stop.file)
    return returns


def summary_row(label: str, calls: Sequence[Call]) -> str:
    """One table row: calls, stops, files, returns and the top five returns."""
    stops = stops_of(calls)
    returns = returns_of(stops)
    top = ", ".join(f"{file} {count}" for file, count in returns.most_common(5)) or "-"
    files = len({stop.file for stop in stops})
    return f"| {label} | {len(calls)} | {len(stops)} | {files} | {returns.total()} | {top} |"


def until_peer(calls: Sequence[Call]) -> Sequence[Call]:
    """The calls before the peer's first one: from A's door to B's relay."""
    first = next((i for i, call in enumerate(calls) if call.node == "peer"), len(calls))
    return calls[:first]


def report(calls: Sequence[Call], *, resumes: bool) -> str:
    """The markdown report of one traced request."""
    counted = "calls and resumptions" if resumes else "calls (resumptions not counted)"
    lines = [
        "# The path of one request through the proxy worker",
        "",
        f"Code: `{Path(backend.__file__).parent}` at {_commit()}; {counted} under "
        "`backend/workers/proxy/`.",
        "One non-streaming `/api/chat`: A's Ollama door -> routing -> B's relay (mutual TLS) "
        "-> B's scheduler -> B's ScriptedEngine, and back.",
        "",
        "| part | calls | stops | files | returns | returns per file (top 5) |",
        "|---|---|---|---|---|---|",
        summary_row("whole path", calls),
        summary_row("door to the peer's relay", until_peer(calls)),
    ]
    for node in ("sender", "peer", "background"):
        part = [call for call in calls if call.node == node]
        if part:
            lines.append(summary_row(f"{node} only", part))
    lines += ["", "## Stops in order", ""]
    for number, stop in enumerate(stops_of(calls), start=1):
        functions = ", ".join(stop.functions)
        lines.append(f"{number}. `{stop.file}` ({stop.node}): {functions}")
    return "\n".join(lines)


def _commit() -> str:
    def git(*argv: str) -> str:
        run = subprocess.run(["git", "-C", str(ROOT), *argv], capture_output=True, text=True)
        return run.stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "an unknown commit"
    if git("status", "--porcelain", "--", str(PROXY)):
        return f"{commit} (with uncommitted changes to the worker)"
    return commit


def _marking(node: str) -> Middleware:
    @web.middleware
    async def mark(request: web.Request, handler: Handler) -> web.StreamResponse:
        NODE.set(node)
        return await handler(request)

    return mark


def _marked(app: web.Application, node: str) -> web.Application:
    app.middlewares.insert(0, _marking(node))
    return app


@contextlib.asynccontextmanager
async def two_nodes() -> AsyncIterator[str]:
    """Node B (relay over mutual TLS, scripted engine) and node A (door, B as its peer): the
    URL of A's door."""
    async with contextlib.AsyncExitStack() as stack:
        engine = await start_engine(ScriptedEngine("b-engine"))
        assert engine.server is not None
        stack.push_async_callback(engine.server.stop)
        a, b = mint(NodeId("node-a")), mint(NodeId("node-b"))
        node_a, node_b = await worker(stack, a), await worker(stack, b)
        local = RouteTarget(node_id="node-b", kind="local", base_url=engine.url, models=[MODEL])
        relay_url = await serve_relay(stack, node_b)
        peer = RouteTarget(
            node_id="node-b", kind="peer", base_url=relay_url, models=[MODEL], cert_der=b.cert_der
        )
        adopt(
            node_b,
            ProxyTargets(node_id="node-b", engines={"ollama": [local]}, trusted=[a.cert_der]),
        )
        adopt(
            node_a, ProxyTargets(node_id="node-a", engines={"ollama": [peer]}, trusted=[b.cert_der])
        )
        door = TestServer(_marked(build_app(node_a), "sender"))
        await door.start_server()
        stack.push_async_callback(door.close)
        yield str(door.make_url(""))


def adopt(node: DoorContext, table: ProxyTargets) -> None:
    """What the worker does with each table the broker sends: pins, then routes."""
    tls_of(node).follow(table)
    node.router.update(table)


def tls_of(node: DoorContext) -> PeerTls:
    """The node's pinned TLS (the relay's listener and its client contexts)."""
    return node.router.links.peer_tls


async def serve_relay(stack: contextlib.AsyncExitStack, node: DoorContext) -> str:
    """Serve ``node``'s relay app over its pinned TLS on a free port; its URL."""
    peer_tls = tls_of(node)
    relay_app = build_relay_app({"ollama": node}, node.board, peer_tls)
    runner = web.AppRunner(_marked(relay_app, "peer"), handler_cancellation=True)
    await runner.setup()
    stack.push_async_callback(runner.cleanup)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    await web.SockSite(runner, sock, ssl_context=peer_tls.server_context()).start()
    return f"https://127.0.0.1:{sock.getsockname()[1]}"


async def chat(client: aiohttp.ClientSession, door_url: str, tag: str) -> None:
    """One non-streaming chat through A's door; raises unless B's engine answered it."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": False}
    body["tag"] = tag
    async with client.post(f"{door_url}/api/chat", json=body) as response:
        answer = await response.json()
        if response.status != 200 or answer.get("done") is not True:
            raise RuntimeError(f"the request failed: {response.status} {answer}")


async def trace(*, resumes: bool) -> list[Call]:
    """Warm up with one request, then record the worker's calls during a second one."""
    async with two_nodes() as door_url, aiohttp.ClientSession() as client:
        await chat(client, door_url, "warm-up")
        recorder = Recorder(resumes=resumes)
        sys.setprofile(recorder)
        try:
            await chat(client, door_url, "traced")
        finally:
            sys.setprofile(None)
        await asyncio.sleep(0.1)  # lets job events and kept connections settle before closing
    return recorder.calls


def main() -> None:
    """Trace one request and print the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--resumes", action="store_true", help="count resumed coroutines as calls too"
    )
    resumes = parser.parse_args().resumes
    print(report(asyncio.run(trace(resumes=resumes)), resumes=resumes))


if __name__ == "__main__":
    main()
