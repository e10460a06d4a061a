"""The rig of ``bench/split.py``: the model, the binaries, the network, the paired nodes and every
process a configuration needs, each stopped by its PID.

Not a benchmark itself. One configuration is one ``llama-server`` (in this namespace, on
loopback) with the layers spread over zero, one or two members, reached over plain TCP or
through PAIR's RPC tunnel, on loopback or across network namespaces:

- plain TCP: ``rpc-server`` started here with the flags PAIR's ``RpcServerLender`` gives it,
  but bound to the address ``llama-server`` dials (the member namespace's bridge address):
  PAIR never exposes ``rpc-server`` so; it is the baseline the tunnel is measured against;
- tunnel: ``bench/_split_node.py`` runs the member side (the node API's tunnel route, whose
  lender starts ``rpc-server`` on the namespace's loopback) and the host side (a
  ``TunnelListener`` per member), and ``llama-server --rpc`` dials the listeners.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import aiohttp
from _common import ROOT, free_port
from _soak_netns import SUBNET, SoakNetwork
from _split_node import CLOCK_START, save_credentials

from backend.common.gguf import read_file
from backend.components.engines.rpc_binary import rpc_server_path
from backend.components.split.members import Candidate
from backend.components.split.model_shape import layer_count
from backend.components.split.plan import SplitPlan, SplitRefused, plan_split
from backend.core.net import port_in_use
from backend.core.processes import child_preexec, stop_child
from backend.devtools import tiny_model
from backend.devtools.llama_server import search_llama_server
from backend.protocol.types.base import NodeId
from tests.fakes import FakeClock
from tests.support.netfaults import run_ip
from tests.unit.cluster.harness import A_ID, B_ID, C_ID, pair, start_node, stop_node

# Six blocks share out evenly over one, two and three nodes. Twice the tiny model's width (1.3 M
# parameters, 5.4 MB in F32): some 2,500 tokens/s on one core here, steadier than the tiny
# model's 5,000; four times its width ran 100-400 tokens/s, swinging with the machine's load.
MODEL_SHAPE = tiny_model.ModelShape(
    embedding_length=128, block_count=6, head_count=4, feed_forward_length=384
)
MODEL_CACHE = ROOT / "build" / "test-models"
HOST_NAME = "a"
MEMBERS: tuple[tuple[str, NodeId], ...] = (("b", B_ID), ("c", C_ID))
# What the planner is told each node has free: equal, so the layers share out evenly.
FREE_RAM_BYTES = 64 * 1024**3
CONTEXT = 1024
# Every llama-server and rpc-server computes on one thread: the nodes share this computer's
# cores, and llama.cpp's threads spin while they wait, so with two threads each on two cores the
# processes of one spread took turns at 100 ms a token (1.3 ms with one thread each).
THREADS = 1
READY_TIMEOUT_S = 120.0
STOP_GRACE_S = 5.0

Carrier = Literal["alone", "tcp", "tunnel"]
NetworkKind = Literal["loopback", "namespaces"]


@dataclass(frozen=True)
class Config:
    """One way of running the model: how many nodes, how they talk, over what network."""

    nodes: int
    carrier: Carrier
    network: NetworkKind

    @property
    def label(self) -> str:
        """The configuration in a table row."""
        if self.carrier == "alone":
            return "1 node"
        how = "plain TCP" if self.carrier == "tcp" else "tunnel"
        return f"{self.nodes} nodes, {how}, {self.network}"


@dataclass(frozen=True)
class Place:
    """Where a member runs: its namespace (None: this one) and the address the host dials."""

    namespace: str | None
    address: str

    def prefix(self) -> list[str]:
        """The argv prefix that runs a command there."""
        return [] if self.namespace is None else ["ip", "netns", "exec", self.namespace]


def split_model() -> Path:
    """The benchmark's model (``MODEL_SHAPE``), generated once per generator version."""
    source = Path(tiny_model.__file__).read_bytes() + repr(MODEL_SHAPE).encode()
    path = MODEL_CACHE / f"split-bench-{hashlib.sha256(source).hexdigest()[:12]}.gguf"
    if not path.exists():
        MODEL_CACHE.mkdir(parents=True, exist_ok=True)
        tiny_model.write_model(path, shape=MODEL_SHAPE)
    return path


def binaries() -> tuple[Path, Path] | str:
    """``llama-server`` and the ``rpc-server`` beside it, or why they cannot be used."""
    found = search_llama_server()
    if found.binary is None:
        return found.reason
    rpc_server = rpc_server_path(found.binary)
    if rpc_server is None:
        return f"no rpc-server beside {found.binary}: this llama.cpp was built without GGML_RPC"
    shown = subprocess.run(
        [str(found.binary), "--help"], capture_output=True, text=True, timeout=30
    ).stdout
    if "--rpc" not in shown:
        return f"{found.binary} has no --rpc option: it was built without GGML_RPC"
    return found.binary, rpc_server


def plan_for(model: Path, nodes: int) -> SplitPlan | None:
    """PAIR's plan for ``nodes`` nodes with equal free RAM (the host first); None for one."""
    if nodes == 1:
        return None
    ids = (A_ID, *(node_id for _, node_id in MEMBERS[: nodes - 1]))
    candidates = [Candidate(node_id, ram_free_bytes=FREE_RAM_BYTES) for node_id in ids]
    size, layers = model.stat().st_size, layer_count(read_file(model))
    planned = plan_split(size, layers, candidates, A_ID, every_member=True)
    if isinstance(planned, SplitRefused):
        raise RuntimeError(f"the planner refused the benchmark's split: {planned.why}")
    return planned


async def pair_nodes(folder: Path) -> None:
    """A paired with B and with C (real pairing over mutual TLS on loopback, in this process);
    their files and credentials are left under ``folder`` for ``_split_node.py``."""
    clock = FakeClock(start=CLOCK_START)
    a = await start_node(folder, HOST_NAME, clock, A_ID)
    members = [await start_node(folder, name, clock, node_id) for name, node_id in MEMBERS]
    try:
        for member in members:
            await pair(a, member)
    finally:
        for node in (a, *members):
            await stop_node(node)
    for node in (a, *members):
        save_credentials(folder / node.name, node.credentials)


@contextlib.asynccontextmanager
async def network(*, loopback_only: bool) -> AsyncIterator[tuple[dict[str, Place], str | None]]:
    """The members' places, and why they are on loopback (None: in namespaces on a bridge,
    which this namespace reaches at the bridge's own address)."""
    why = "--loopback-only was given" if loopback_only else SoakNetwork.unavailable()
    if why is not None:
        yield {name: Place(None, "127.0.0.1") for name, _ in MEMBERS}, why
        return
    _remove_leftovers()
    made = SoakNetwork(tuple(name for name, _ in MEMBERS))
    try:
        made.open()
        run_ip("ip", "addr", "add", f"{SUBNET}.1/24", "dev", made.bridge)
        places = {name: Place(made.namespaces[name], made.addresses[name]) for name, _ in MEMBERS}
        yield places, None
    finally:
        await made.close()


def _remove_leftovers() -> None:
    """Remove the bridge (and its namespaces) of a run that was killed before it could: its
    address on the bridge would leave this namespace two routes to the members' subnet (so
    two runs at once cannot work either)."""
    shown = subprocess.run(
        ["ip", "-o", "-4", "addr", "show", "to", f"{SUBNET}.1/32"],
        capture_output=True,
        text=True,
        timeout=10,
    ).stdout
    for bridge in {line.split()[1] for line in shown.splitlines()}:
        tag = bridge.removeprefix("psb")
        if tag == bridge:
            continue  # not one of ours
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        for namespace in (line.split()[0] for line in listed.splitlines() if line.strip()):
            if namespace.startswith(f"psns{tag}"):
                subprocess.run(["ip", "netns", "del", namespace], capture_output=True, timeout=10)
        subprocess.run(["ip", "link", "del", bridge], capture_output=True, timeout=10)


class Processes:
    """Owns every process the benchmark starts (output in ``logs``, made if need be);
    ``stop_all`` stops them by PID."""

    def __init__(self, logs: Path) -> None:
        logs.mkdir(parents=True, exist_ok=True)
        self.logs = logs
        self._started: list[tuple[str, asyncio.subprocess.Process, bool]] = []

    async def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        place: Place | None = None,
        env: dict[str, str] | None = None,
        python: bool = False,
    ) -> asyncio.subprocess.Process:
        """Start ``argv`` at ``place``, output to ``logs/name.log`` (a ``python`` child's
        standard output stays a pipe, for its ready line; its standard input's end stops it)."""
        full = [*(place.prefix() if place else []), *argv]
        with (self.logs / f"{name}.log").open("ab") as log:
            process = await asyncio.create_subprocess_exec(
                *full,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE if python else log,
                stderr=log,
                env=env,
                cwd=ROOT,
                preexec_fn=child_preexec(),
                start_new_session=True,  # Ctrl+C reaches this process only; it stops the rest
            )
        self._started.append((name, process, python))
        return process

    def tail(self, name: str, lines: int = 6) -> str:
        """The last lines ``name`` wrote, on one line."""
        text = (self.logs / f"{name}.log").read_text(errors="replace").strip().splitlines()
        return " / ".join(text[-lines:]) or "no output"

    async def stop_all(self) -> None:
        """Stop every process started here (stdin's end for Python children, then SIGTERM, then
        SIGKILL): every ``llama-server`` first, then the rest, each wave at once. A
        ``llama-server`` whose members went first dies freeing their buffers, with a backtrace."""
        started, self._started = self._started, []
        servers = [entry for entry in started if entry[0].endswith("llama-server")]
        for wave in (servers, [entry for entry in started if entry not in servers]):
            await asyncio.gather(
                *(
                    stop_child(process, grace=STOP_GRACE_S, close_stdin=python)
                    for _, process, python in wave
                ),
                return_exceptions=True,
            )


async def ready_ports(process: asyncio.subprocess.Process) -> list[int]:
    """The ports a ``_split_node.py`` child prints when it is ready."""
    assert process.stdout is not None
    async with asyncio.timeout(READY_TIMEOUT_S):
        line = await process.stdout.readline()
    if not line:
        raise RuntimeError(f"exited with status {await process.wait()} before it was ready")
    ports = json.loads(line)["ports"]
    return [int(port) for port in ports]


async def until_healthy(url: str, process: asyncio.subprocess.Process) -> None:
    """Poll ``url/health`` until it answers 200; raise if the process exits or time runs out."""
    timeout = aiohttp.ClientTimeout(total=2)
    async with asyncio.timeout(READY_TIMEOUT_S), aiohttp.ClientSession(timeout=timeout) as session:
        while process.returncode is None:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with session.get(f"{url}/health") as answer:
                    if answer.status == 200:
                        return
            await asyncio.sleep(0.1)
    raise RuntimeError(f"llama-server exited with status {process.returncode}")


def copy_node(paired: Path, name: str, into: Path) -> None:
    """A copy of node ``name``'s files for one child (two children never share a database)."""
    shutil.copytree(paired / name, into / name)


def environment(cache: Path) -> dict[str, str]:
    """This environment, with ``rpc-server -c``'s cache in ``cache``."""
    return {**os.environ, "LLAMA_CACHE": str(cache)}


def tcp_port() -> int:
    """A free port (on loopback here; a fresh namespace has every port free)."""
    return free_port()


@dataclass
class Rig:
    """What every configuration is launched from; its processes live in ``processes``."""

    processes: Processes
    work: Path
    model: Path
    llama_server: Path
    rpc_server: Path
    places: dict[NetworkKind, dict[str, Place]]

    async def launch(self, config: Config) -> str:
        """Start ``config``'s processes; the base URL of its ``llama-server`` once healthy."""
        key = f"{config.nodes}-{config.carrier}-{config.network}"
        members = MEMBERS[: config.nodes - 1]
        places = self.places[config.network]
        endpoints: list[str] = []
        if config.carrier == "tcp":
            for name, _ in members:
                endpoints.append(await self._rpc_server(f"{key}-rpc-{name}", places[name]))
        elif config.carrier == "tunnel":
            endpoints = await self._tunnels(key, members, places)
        plan = plan_for(self.model, config.nodes)
        split: tuple[str, ...] = ()
        if plan is not None:
            split = ("--rpc", ",".join(endpoints), "--tensor-split", plan.tensor_split_arg())
            split += ("-ngl", str(plan.gpu_layers))
        return await self._llama_server(f"{key}-llama-server", split)

    async def _rpc_server(self, name: str, place: Place) -> str:
        """rpc-server with the flags ``RpcServerLender`` gives it (``-c``: its tensor cache),
        ``THREADS`` threads, bound to the address the host dials: the plain-TCP baseline only,
        never how PAIR runs it."""
        port, cache = tcp_port(), self.work / f"{name}-cache"
        argv = [str(self.rpc_server), "-H", place.address, "-p", str(port), "-c"]
        argv += ["-t", str(THREADS)]
        process = await self.processes.start(name, argv, place=place, env=environment(cache))
        async with asyncio.timeout(READY_TIMEOUT_S):
            while not await port_in_use(place.address, port):
                if process.returncode is not None:
                    raise RuntimeError(f"{name} exited: {self.processes.tail(name)}")
                await asyncio.sleep(0.05)
        return f"{place.address}:{port}"

    async def _tunnels(
        self, key: str, members: Sequence[tuple[str, NodeId]], places: dict[str, Place]
    ) -> list[str]:
        """The member side on each member's place, the host side here; the listeners' ports."""
        folder = self.work / key
        folder.mkdir()
        node = [sys.executable, str(ROOT / "bench" / "_split_node.py")]
        wanted: list[str] = []
        for name, node_id in members:
            copy_node(self.work / "paired", name, folder)
            place = places[name]
            argv = [*node, "member", "--root", str(folder), "--name", name, "--node-id", node_id]
            argv += ["--listen", place.address, "--llama-server", str(self.llama_server)]
            argv += ["--rpc-threads", str(THREADS)]
            port = await self._ready(f"{key}-member-{name}", argv, place)
            wanted += ["--member", f"{node_id}={place.address}:{port[0]}"]
        copy_node(self.work / "paired", HOST_NAME, folder)
        argv = [*node, "host", "--root", str(folder), "--name", HOST_NAME, "--node-id", A_ID]
        ports = await self._ready(f"{key}-host", [*argv, *wanted], None)
        return [f"127.0.0.1:{port}" for port in ports]

    async def _ready(self, name: str, argv: list[str], place: Place | None) -> list[int]:
        process = await self.processes.start(name, argv, place=place, python=True)
        try:
            return await ready_ports(process)
        except (RuntimeError, TimeoutError, ValueError, KeyError) as exc:
            raise RuntimeError(
                f"{name}: {exc or 'not ready'}: {self.processes.tail(name)}"
            ) from exc

    async def _llama_server(self, name: str, split: tuple[str, ...]) -> str:
        port = tcp_port()
        argv = [str(self.llama_server), "-m", str(self.model), "--host", "127.0.0.1"]
        argv += ["--port", str(port), "-np", "1", "-c", str(CONTEXT), "-t", str(THREADS)]
        argv += split
        process = await self.processes.start(name, argv)
        url = f"http://127.0.0.1:{port}"
        try:
            await until_healthy(url, process)
        except (RuntimeError, TimeoutError) as exc:
            raise RuntimeError(
                f"{name}: {exc or 'not healthy'}: {self.processes.tail(name)}"
            ) from exc
        return url
