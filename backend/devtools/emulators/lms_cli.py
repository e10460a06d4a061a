"""A fake ``lms`` CLI standing in for LM Studio's, driving the LM Studio emulator.

PAIR runs LM Studio as a daemon through ``lms server start --port P`` / ``stop`` / ``status``
and manages models with ``lms load KEY --parallel N``, ``lms unload KEY|--all`` and
``lms ps --json``. This module answers those commands with the real tool's messages (on
stderr; JSON on stdout) and exit codes, and really starts a detached emulator process
(``python -m backend emulate lmstudio``), keeping its PID and port in ``$PAIR_FAKE_LMS_HOME``.
``lms server stop`` stops only the process it started, by PID. Extra emulator arguments can be
passed in ``$PAIR_FAKE_LMS_ARGS`` (for example ``--models a,b --load-delay 0.2``).

Run as ``python -m backend.devtools.emulators.lms_cli ...``; ``write_lms_shim`` puts an ``lms``
script into a directory for tests to put on ``PATH``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import stat
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import psutil

from backend.common.files import write_atomic

DEFAULT_PORT: Final = 1234
_ROOT: Final = Path(__file__).resolve().parents[3]  # the directory that holds backend/
_START_TIMEOUT: Final = 20.0
_STOP_TIMEOUT: Final = 10.0


class LmsFailure(Exception):
    """A command failed; the message is printed and the exit code is 1."""


def home() -> Path:
    """Where the fake keeps its state (``$PAIR_FAKE_LMS_HOME`` or a per-user temp dir)."""
    configured = os.environ.get("PAIR_FAKE_LMS_HOME")
    user = getattr(os, "getuid", lambda: 0)()
    path = Path(configured) if configured else Path(tempfile.gettempdir()) / f"pair-fake-lms-{user}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _write_json(path: Path, value: dict[str, Any]) -> None:
    write_atomic(path, json.dumps(value).encode())


def _info(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _request(port: int, method: str, path: str, body: Any = None, timeout: float = 30.0) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method)
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read() or b"null")


def greeting_ok(port: int) -> bool:
    """Whether an LM Studio (emulator) answers ``/lmstudio-greeting`` on ``port``."""
    try:
        return bool(_request(port, "GET", "/lmstudio-greeting", timeout=0.5) == {"lmstudio": True})
    except (OSError, ValueError):
        return False


def _our_server(state: dict[str, Any]) -> psutil.Process | None:
    """The emulator process we started, if it still runs (checked against PID reuse)."""
    pid = state.get("pid")
    if not isinstance(pid, int):
        return None
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        command = " ".join(process.cmdline())
    except psutil.Error:
        return None
    return process if "emulate lmstudio" in command else None


def server_start(port: int | None, bind: str) -> int:
    """``lms server start``: start the emulator detached and wait until it answers."""
    state_file, status_file = home() / "server.json", home() / "last-status.json"
    if port is None:
        port = int(_read_json(status_file).get("port") or DEFAULT_PORT)
    state = _read_json(state_file)
    running = _our_server(state)
    if running is not None and state.get("port") == port and greeting_ok(port):
        _info(f"Success! Server is now running on port {port}")
        return 0
    if running is not None:
        _terminate(running)
    _info("Starting server...")
    process = _spawn(port, bind)
    _write_json(state_file, {"pid": process.pid, "port": port, "host": bind})
    _write_json(status_file, {"port": port})
    deadline = time.monotonic() + _START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        if greeting_ok(port):
            _info(f"Success! Server is now running on port {port}")
            return 0
        time.sleep(0.1)
    if process.poll() is None:
        _terminate(psutil.Process(process.pid))
    _write_json(state_file, {"port": port})
    raise LmsFailure("Failed to verify the server is running. Please try to use another port.")


def _spawn(port: int, bind: str) -> subprocess.Popen[bytes]:
    extra = shlex.split(os.environ.get("PAIR_FAKE_LMS_ARGS", ""))
    command = [sys.executable, "-m", "backend", "emulate", "lmstudio"]
    command += ["--port", str(port), "--host", bind, *extra]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_ROOT), env.get("PYTHONPATH")]))
    log = (home() / "server.log").open("ab")
    with log:
        return subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
            cwd=_ROOT,
            start_new_session=True,  # detached: it outlives this command, like LM Studio's
        )


def _terminate(process: psutil.Process) -> None:
    try:
        process.send_signal(signal.SIGTERM)
        process.wait(_STOP_TIMEOUT)
    except psutil.TimeoutExpired:
        process.kill()
        process.wait(_STOP_TIMEOUT)
    except psutil.NoSuchProcess:
        return


def server_stop() -> int:
    """``lms server stop``: stop the server this fake started (by its PID)."""
    state_file = home() / "server.json"
    state = _read_json(state_file)
    port = state.get("port")
    process = _our_server(state)
    if not isinstance(port, int) or process is None or not greeting_ok(port):
        raise LmsFailure("The server is not running.")
    _terminate(process)
    _write_json(state_file, {"port": port})
    _info(f"Stopped the server on port {port}.")
    return 0


def server_status(as_json: bool) -> int:
    """``lms server status [--json]``."""
    port = _read_json(home() / "last-status.json").get("port")
    running = isinstance(port, int) and greeting_ok(port)
    _info(f"The server is running on port {port}." if running else "The server is not running.")
    if as_json:
        print(json.dumps({"running": running, "port": port}), flush=True)
    return 0


def _client_port(args: argparse.Namespace) -> int:
    port = args.port or _read_json(home() / "last-status.json").get("port") or DEFAULT_PORT
    if not greeting_ok(int(port)):
        raise LmsFailure('LM Studio is not running. Start the server with "lms server start".')
    return int(port)


def load(args: argparse.Namespace) -> int:
    """``lms load KEY [--parallel N] [-c N] [--ttl S] [--identifier ID]``."""
    port = _client_port(args)
    keys = [entry["key"] for entry in _request(port, "GET", "/api/v1/models")["models"]]
    matches = [key for key in keys if key == args.path]
    if not matches and not args.exact:
        matches = [key for key in keys if args.path.lower() in key.lower()]
    if not matches:
        raise LmsFailure(f'Model not found\n\nNo model found that matches path "{args.path}".')
    body = {
        "model": matches[0],
        "parallel": args.parallel,
        "context_length": args.context_length,
        "ttl": args.ttl,
        "identifier": args.identifier,
    }
    started = time.monotonic()
    loaded = _request(port, "POST", "/_emulator/lms/load", body)
    size = loaded["size_bytes"] / 1e9
    _info(f"Model loaded successfully in {time.monotonic() - started:.2f}s. ({size:.2f} GB)")
    _info(f'To use the model in the API/SDK, use the identifier "{loaded["identifier"]}".')
    return 0


def unload(args: argparse.Namespace) -> int:
    """``lms unload ID`` or ``lms unload --all`` (an unknown id is reported, exit code 0)."""
    port = _client_port(args)
    loaded = [entry["identifier"] for entry in _request(port, "GET", "/_emulator/lms/ps")]
    if args.all:
        if not loaded:
            _info("No models to unload.")
            return 0
        for identifier in loaded:
            _info(f'Unloading "{identifier}"...')
        _request(port, "POST", "/_emulator/lms/unload", {"all": True})
        _info(f"Unloaded {len(loaded)} models." if len(loaded) > 1 else "Unloaded 1 model.")
        return 0
    if args.identifier not in loaded:
        _info(f'Model Not Found\n\nCannot find a model with the identifier "{args.identifier}".')
        return 0
    _request(port, "POST", "/_emulator/lms/unload", {"identifier": args.identifier})
    _info(f'Model "{args.identifier}" unloaded.')
    return 0


def ps(args: argparse.Namespace) -> int:
    """``lms ps [--json]``: loaded instances with status, queued and parallel."""
    instances = _request(_client_port(args), "GET", "/_emulator/lms/ps")
    if args.json:
        print(json.dumps(instances), flush=True)
    elif not instances:
        print("No models are currently loaded.", flush=True)
    else:
        print("IDENTIFIER  MODEL  STATUS  CONTEXT  PARALLEL  QUEUED", flush=True)
        for item in instances:
            row = (item["identifier"], item["modelKey"], item["status"].upper())
            numbers = (item["contextLength"], item["parallel"], item["queued"])
            print(*row, *numbers, flush=True)
    return 0


def ls(args: argparse.Namespace) -> int:
    """``lms ls [--json]``: downloaded models."""
    models = _request(_client_port(args), "GET", "/api/v1/models")["models"]
    if args.json:
        print(json.dumps(models), flush=True)
    else:
        for entry in models:
            print(entry["key"], flush=True)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The subset of ``lms`` the emulator supports."""
    parser = argparse.ArgumentParser(prog="lms", description="LM Studio CLI (emulator)")
    commands = parser.add_subparsers(dest="command", required=True)
    server = commands.add_parser("server").add_subparsers(dest="action", required=True)
    start = server.add_parser("start")
    start.add_argument("-p", "--port", type=int)
    start.add_argument("--bind", default=os.environ.get("LMS_SERVER_HOST", "127.0.0.1"))
    start.add_argument("--cors", action="store_true")
    server.add_parser("stop")
    server.add_parser("status").add_argument("--json", action="store_true")
    load_parser = _client(commands.add_parser("load"))
    load_parser.add_argument("path")
    load_parser.add_argument("--parallel", type=int)
    load_parser.add_argument("-c", "--context-length", type=int)
    load_parser.add_argument("--ttl", type=int)
    load_parser.add_argument("--identifier")
    load_parser.add_argument("--gpu")
    load_parser.add_argument("--exact", action="store_true")
    load_parser.add_argument("-y", "--yes", action="store_true")
    unload_parser = _client(commands.add_parser("unload"))
    unload_parser.add_argument("identifier", nargs="?")
    unload_parser.add_argument("-a", "--all", action="store_true")
    _client(commands.add_parser("ps")).add_argument("--json", action="store_true")
    _client(commands.add_parser("ls")).add_argument("--json", action="store_true")
    commands.add_parser("version")
    return parser


def _client(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        return _dispatch(args)
    except LmsFailure as exc:
        _info(str(exc))
        return 1
    except (urllib.error.URLError, OSError) as exc:
        _info(f"Error: {exc}")
        return 1


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "server":
        if args.action == "start":
            return server_start(args.port, args.bind)
        if args.action == "stop":
            return server_stop()
        return server_status(args.json)
    if args.command == "version":
        print("lms - LM Studio CLI (PAIR emulator)", flush=True)
        return 0
    handlers = {"load": load, "unload": unload, "ps": ps, "ls": ls}
    return handlers[args.command](args)


def write_lms_shim(directory: Path) -> Path:
    """Write an executable ``lms`` into ``directory`` that runs this fake; returns its path."""
    directory.mkdir(parents=True, exist_ok=True)
    shim = directory / "lms"
    shim.write_text(
        "#!/bin/sh\n"
        "# The PAIR LM Studio emulator's fake lms CLI.\n"
        f'PYTHONPATH={shlex.quote(str(_ROOT))}"${{PYTHONPATH:+:$PYTHONPATH}}" '
        f'exec {shlex.quote(sys.executable)} -m backend.devtools.emulators.lms_cli "$@"\n'
    )
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return shim


if __name__ == "__main__":
    sys.exit(main())
