"""The smoke test of a frozen build: ``python packaging/smoke.py PATH/TO/pair``.

With a fresh data dir, free ports (never the defaults), the keyring and mDNS off and the
XDG folders in a scratch dir, it checks that:

1. ``pair --version`` prints the version;
2. ``pair node`` starts, and its proxy worker runs as ``pair worker proxy``, on uvloop (asyncio's
   loop on Windows, where uvloop does not exist);
3. the Ollama front door answers ``GET /api/version`` through the worker: with no engine behind
   it the worker itself answers 503 "no engine is running behind the ollama front door" (an
   engine's 200 is accepted too), with the worker's ``X-PAIR-Proxy-Ms`` header; ``GET
   /api/tags`` is answered 200 by the worker's own listing;
4. ``pair status`` attaches and shows that node (its PID and a running proxy worker);
5. the GUI (``QT_QPA_PLATFORM=offscreen``, ``PAIR_QUIT_WHEN_READY=1``) starts with the same data
   dir, attaches to that broker (it does not start one) and quits by itself; the time from its
   launch to its window's first paint is printed;
6. the GUI started with a data dir of its own starts its broker (``pair node --stdio``, the
   frozen executable again), and quitting stops that broker;
7. ``pair stop`` stops the node cleanly (exit code 0) and no process of the run is left.

Exits 0 when all hold, 1 naming the first that did not. Every process it starts is stopped by its
PID, whatever happens. Needs psutil (in PAIR's environment).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil

PORT_FLAGS = ("--node-port", "--ollama-port", "--openai-port", "--llamacpp-port", "--relay-port")
DEFAULT_PORTS = frozenset({14320, 11434, 1234, 8080, 14321})
PROXY_HEADER = "x-pair-proxy-ms"  # the worker's timing header (header names in lower case)
NO_ENGINE = "no engine is running behind the ollama front door"
WINDOW_SHOWN = "quit-when-ready: window shown"
READY_PREFIX = "quit-when-ready: ready"
NODE_READY = "PAIR node "
WORKER_READY = "worker proxy ready ("
NODE_PID = re.compile(r"^PAIR node \S+ is running \(pid (\d+)")
VERSION_LINE = re.compile(r"^pair \d+\.\d+\.\d+")
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


class SmokeFailed(Exception):
    """A check did not hold; the message says which."""


class Child:
    """A process this script started, its stdout read line by line on a thread (timed)."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.name = name
        self.log = log
        self.started = time.monotonic()
        with log.open("wb") as stderr:
            self.process = subprocess.Popen(
                argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr
            )
        self.lines: queue.Queue[tuple[float, str | None]] = queue.Queue()
        self._reader = threading.Thread(target=self._read, name=f"smoke-{name}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            line = raw.decode("utf-8", "replace").rstrip()
            print(f"    {self.name}| {line}", flush=True)
            self.lines.put((time.monotonic() - self.started, line))
        self.lines.put((time.monotonic() - self.started, None))

    def wait_for_lines(self, *prefixes: str, timeout: float) -> dict[str, tuple[float, str]]:
        """For each prefix, the first line (from now) starting with it and when it came after
        the launch, in whatever order they come."""
        found: dict[str, tuple[float, str]] = {}
        deadline = time.monotonic() + timeout
        while len(found) < len(prefixes):
            missing = [prefix for prefix in prefixes if prefix not in found]
            try:
                at, line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise SmokeFailed(f"{self.name}: no {missing} within {timeout:.0f} s") from None
            if line is None:
                code = self.process.wait()
                raise SmokeFailed(
                    f"{self.name} exited with code {code} before {missing}: {self.tail()}"
                )
            for prefix in missing:
                if line.startswith(prefix):
                    found[prefix] = (at, line)
        return found

    def tail(self) -> str:
        """The end of its stderr."""
        text = self.log.read_text("utf-8", "replace").strip()
        return text[-2000:] or "(nothing on stderr)"

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after a grace period; by PID, only if still running."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self._reader.join(5)


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free right now on every address, none of PAIR's defaults."""
    with contextlib.ExitStack() as stack:
        ports: list[int] = []
        while len(ports) < count:
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("", 0))
            port = sock.getsockname()[1]
            if port not in DEFAULT_PORTS:
                ports.append(port)
        return ports


def port_args(ports: list[int]) -> list[str]:
    """``--node-port N --ollama-port N ...`` for ``ports`` in the order of ``PORT_FLAGS``."""
    pairs = zip(PORT_FLAGS, ports, strict=True)
    return [arg for flag, port in pairs for arg in (flag, str(port))]


def run(argv: list[str], env: dict[str, str], timeout: float = 30.0) -> tuple[int, str, float]:
    """Run a short command; its exit code, stdout and seconds taken. Killed on timeout."""
    started = time.monotonic()
    try:
        done = subprocess.run(
            argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as exc:
        raise SmokeFailed(f"{' '.join(argv[1:])} took more than {timeout:.0f} s") from exc
    output = done.stdout.decode("utf-8", "replace")
    if done.returncode != 0:
        raise SmokeFailed(
            f"{' '.join(argv[1:])} exited with code {done.returncode}: "
            f"{done.stderr.decode('utf-8', 'replace').strip()[-2000:]}"
        )
    return done.returncode, output, time.monotonic() - started


def get(url: str) -> tuple[int, set[str], bytes]:
    """One HTTP GET: status, the header names in lower case, body (error statuses included)."""
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status, {name.lower() for name in answer.headers}, answer.read()
    except urllib.error.HTTPError as answer:
        return answer.code, {name.lower() for name in answer.headers}, answer.read()


def environment(scratch: Path) -> dict[str, str]:
    """The environment of every process of the run: no keyring, no mDNS, private XDG dirs."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
    env.update(
        PAIR_KEYRING="off",
        PAIR_DISCOVERY_MDNS="0",
        XDG_CONFIG_HOME=str(scratch / "config"),
        XDG_DATA_HOME=str(scratch / "share"),
        XDG_CACHE_HOME=str(scratch / "cache"),
    )
    return env


class Smoke:
    """One run of the checks; ``children`` and ``seen`` are every process it knows of."""

    def __init__(self, pair: Path, scratch: Path) -> None:
        self.pair = str(pair)
        self.scratch = scratch
        self.data_dir = scratch / "data"
        self.env = environment(scratch)
        self.ports = free_ports(len(PORT_FLAGS))
        self.port_args = port_args(self.ports)
        self.children: list[Child] = []
        self.seen: dict[int, psutil.Process] = {}
        self.figures: dict[str, str] = {}

    def start(self, name: str, args: list[str], env: dict[str, str] | None = None) -> Child:
        child = Child(name, [self.pair, *args], env or self.env, self.scratch / f"{name}.stderr")
        self.children.append(child)
        self._note(child.process.pid)
        return child

    def _note(self, pid: int) -> None:
        with contextlib.suppress(psutil.Error):
            process = psutil.Process(pid)
            self.seen[pid] = process
            for descendant in process.children(recursive=True):
                self.seen.setdefault(descendant.pid, descendant)

    def check_version(self) -> None:
        _, output, seconds = run([self.pair, "--version"], self.env)
        if not VERSION_LINE.match(output.strip()):
            raise SmokeFailed(f"pair --version printed {output.strip()!r}")
        self.figures["version"] = output.strip()
        self.figures["pair --version"] = f"{seconds:.2f} s"
        print(f"ok: pair --version: {output.strip()} ({seconds:.2f} s)")

    def start_node(self) -> tuple[Child, int]:
        """``pair node`` and the broker's PID (the child's, or a descendant's when ``pair`` is
        a launcher script)."""
        node = self.start("node", ["node", "--data-dir", str(self.data_dir), *self.port_args])
        at, line = node.wait_for_lines(NODE_READY, timeout=START_TIMEOUT_S)[NODE_READY]
        match = NODE_PID.search(line)
        if match is None:
            raise SmokeFailed(f"pair node announced {line!r}")
        broker = int(match.group(1))
        self._note(node.process.pid)
        if broker not in self.seen:
            raise SmokeFailed(f"the node says pid {broker}, not a process this run started")
        self.figures["pair node ready"] = f"{at:.2f} s"
        print(f"ok: pair node is running, broker pid {broker}, ready {at:.2f} s after launch")
        return node, broker

    def check_worker(self, broker: int) -> int:
        children = psutil.Process(broker).children()
        workers = [child for child in children if _runs(child.cmdline(), "worker", "proxy")]
        if len(workers) != 1:
            found = [child.cmdline() for child in children]
            raise SmokeFailed(f"expected one `pair worker proxy` child of the broker: {found}")
        self.seen.setdefault(workers[0].pid, workers[0])
        command = workers[0].cmdline()
        shown = " ".join(command[: command.index("proxy") + 1])
        print(f"ok: the proxy worker runs as `{shown} ...`, pid {workers[0].pid}")
        return workers[0].pid

    def check_worker_loop(self, node: Child) -> None:
        """The worker runs on uvloop (bundled) except on Windows, where asyncio's loop is it."""
        lines = node.log.read_text("utf-8", "replace").splitlines()
        ready = next((line for line in lines if WORKER_READY in line), None)
        if ready is None:
            raise SmokeFailed(f"the node's log has no {WORKER_READY!r} line")
        wanted = "asyncio" if sys.platform == "win32" else "uvloop"
        if f", {wanted}." not in ready:  # "worker proxy ready (pid N, uvloop.Loop)"
            raise SmokeFailed(f"the proxy worker does not run on {wanted}: {ready.strip()}")
        print(f"ok: the proxy worker runs on {wanted}'s event loop")

    def check_front_door(self) -> None:
        door = f"http://127.0.0.1:{self.ports[PORT_FLAGS.index('--ollama-port')]}"
        status, headers, body = get(door + "/api/version")
        text = body.decode("utf-8", "replace")
        if PROXY_HEADER not in headers:
            raise SmokeFailed(f"/api/version: no {PROXY_HEADER} header, so not the worker: {text}")
        if not (status == 503 and NO_ENGINE in text) and not (
            status == 200 and "version" in json.loads(body)
        ):
            raise SmokeFailed(f"/api/version answered {status}: {text}")
        print(f"ok: GET /api/version through the proxy worker: {status} {text}")
        status, headers, body = get(door + "/api/tags")
        if status != 200 or "models" not in json.loads(body) or PROXY_HEADER not in headers:
            raise SmokeFailed(f"/api/tags answered {status}: {body!r}")
        print(f"ok: GET /api/tags answered by the proxy worker: {status} {body.decode()}")

    def check_status(self, broker: int, worker: int) -> None:
        _, output, _ = run([self.pair, "status", "--data-dir", str(self.data_dir)], self.env)
        print("    status| " + "\n    status| ".join(output.rstrip().splitlines()))
        _, output, _ = run(
            [self.pair, "status", "--data-dir", str(self.data_dir), "--json"], self.env
        )
        status = json.loads(output)
        if status["pid"] != broker:
            raise SmokeFailed(f"pair status shows pid {status['pid']}, not {broker}")
        proxy = [c for c in status["components"] if c["name"] == "proxy"]
        if not proxy or proxy[0]["status"] != "running" or proxy[0].get("pid") != worker:
            raise SmokeFailed(f"pair status shows the proxy worker as {proxy}")
        print(f"ok: pair status attached: node {status['node_name']}, proxy worker running")

    def check_gui(self, node: Child) -> None:
        env = dict(self.env, QT_QPA_PLATFORM="offscreen", PAIR_QUIT_WHEN_READY="1")
        gui = self.start("gui", ["--data-dir", str(self.data_dir), *self.port_args], env)
        self._note(gui.process.pid)
        found = gui.wait_for_lines(WINDOW_SHOWN, READY_PREFIX, timeout=START_TIMEOUT_S)
        shown_at, ready_at, line = found[WINDOW_SHOWN][0], *found[READY_PREFIX]
        if "attached broker" not in line:
            raise SmokeFailed(f"the GUI did not attach to the running node: {line}")
        try:
            code = gui.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise SmokeFailed("the GUI did not quit after it was ready") from None
        if code != 0:
            raise SmokeFailed(f"the GUI exited with code {code}: {gui.tail()}")
        if node.process.poll() is not None:
            raise SmokeFailed("the node stopped when the GUI that attached to it quit")
        self.figures["GUI window shown"] = f"{shown_at:.2f} s"
        self.figures["GUI attached"] = f"{ready_at:.2f} s"
        print(f"ok: GUI window shown {shown_at:.2f} s after launch, attached at {ready_at:.2f} s,")
        print("    then it quit by itself (exit code 0) and left the node running")

    def check_gui_with_its_own_broker(self) -> None:
        env = dict(self.env, QT_QPA_PLATFORM="offscreen", PAIR_QUIT_WHEN_READY="1")
        data_dir = self.scratch / "data-gui"
        ports = port_args(free_ports(len(PORT_FLAGS)))
        gui = self.start("gui-own", ["--data-dir", str(data_dir), *ports], env)
        found = gui.wait_for_lines(READY_PREFIX, timeout=START_TIMEOUT_S)
        _, line = found[READY_PREFIX]
        self._note(gui.process.pid)
        if "owned broker" not in line:
            raise SmokeFailed(f"the GUI with a fresh data dir did not start its broker: {line}")
        broker = self.seen.get(int(line.rsplit(" ", 1)[1]))
        if broker is None or not _runs(broker.cmdline(), "node", "--stdio"):
            raise SmokeFailed(f"the GUI's broker is not `pair node --stdio`: {broker}")
        try:
            code = gui.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise SmokeFailed("the GUI did not quit after it was ready") from None
        if code != 0:
            raise SmokeFailed(f"the GUI exited with code {code}: {gui.tail()}")
        if _alive(broker):
            with contextlib.suppress(psutil.TimeoutExpired):
                broker.wait(STOP_TIMEOUT_S)
        if _alive(broker):
            raise SmokeFailed(f"the GUI quit and left its broker (pid {broker.pid}) running")
        print(f"ok: GUI with its own data dir started `pair node --stdio` (pid {broker.pid}),")
        print("    quit by itself and stopped that broker")

    def check_stop(self, node: Child) -> None:
        self._note(node.process.pid)
        run([self.pair, "stop", "--data-dir", str(self.data_dir)], self.env)
        try:
            code = node.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise SmokeFailed(f"pair node did not stop within {STOP_TIMEOUT_S:.0f} s") from None
        if code != 0:
            raise SmokeFailed(f"pair node exited with code {code}: {node.tail()}")
        left = self.left_running(timeout=10.0)
        if left:
            raise SmokeFailed(f"processes left after pair stop: {left}")
        print(f"ok: pair stop: the node exited with code 0; no process of {len(self.seen)} left")

    def left_running(self, timeout: float) -> list[str]:
        """The processes seen during the run that still run after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            left = [
                f"{pid} {process.cmdline()}"
                for pid, process in self.seen.items()
                if _alive(process)
            ]
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.2)

    def run(self) -> None:
        self.check_version()
        node, broker = self.start_node()
        worker = self.check_worker(broker)
        self.check_worker_loop(node)
        self.check_front_door()
        self.check_status(broker, worker)
        self.check_gui(node)
        self.check_gui_with_its_own_broker()
        self.check_stop(node)

    def clean_up(self) -> None:
        """Stop every child, then kill any process of the run still running (by PID)."""
        for child in self.children:
            child.stop()
        for process in self.seen.values():
            if _alive(process):
                with contextlib.suppress(psutil.Error):
                    process.kill()


def _runs(command: list[str], *args: str) -> bool:
    # `pair ARGS ...`: the frozen executable, or `python -m backend ARGS` from a checkout.
    return any(tuple(command[i : i + len(args)]) == args for i in range(len(command)))


def _alive(process: psutil.Process) -> bool:
    # is_running() also checks the creation time, so a reused PID is not taken for ours.
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@contextlib.contextmanager
def scratch_dir(keep: bool) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="pair-smoke-"))
    try:
        yield path
    finally:
        if keep:
            print(f"smoke: kept {path}")
        else:
            shutil.rmtree(path, ignore_errors=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Smoke-test a frozen PAIR build.")
    parser.add_argument("pair", type=Path, help="the frozen app's pair executable")
    parser.add_argument("--keep", action="store_true", help="keep the scratch dir and logs")
    args = parser.parse_args(argv)
    pair = args.pair.resolve()
    if not os.access(pair, os.X_OK):
        print(f"smoke: FAILED: {pair} is not an executable", file=sys.stderr)
        return 1
    with scratch_dir(args.keep) as scratch:
        smoke = Smoke(pair, scratch)
        try:
            smoke.run()
        except (SmokeFailed, OSError, ValueError, KeyError, psutil.Error) as exc:
            print(f"smoke: FAILED: {exc}", file=sys.stderr)
            return 1
        finally:
            smoke.clean_up()
    print("smoke: passed")
    for what, figure in smoke.figures.items():
        print(f"  {what:<18} {figure}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
