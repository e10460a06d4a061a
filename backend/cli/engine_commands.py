"""``pair engines``, ``pair models``, ``pair pull``, ``pair engine start|stop|restart``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import msgspec

from backend.cli import client_commands, exit_codes
from backend.protocol import methods
from backend.protocol.peer import RpcPeer
from backend.protocol.types import EngineModels, EngineStatus, PullProgress


def add_parsers(commands: Any, add_data_dir: Any) -> None:
    """Register the engine commands on the ``pair`` parser."""
    engines = commands.add_parser("engines", help="list this node's engines and their state")
    add_data_dir(engines)
    models = commands.add_parser("models", help="list models of the running engines")
    add_data_dir(models)
    pull = commands.add_parser("pull", help="download a model into an engine, with progress")
    pull.add_argument("engine")
    pull.add_argument("model")
    add_data_dir(pull)
    engine = commands.add_parser("engine", help="start, stop or restart an engine")
    engine.add_argument("operation", choices=("start", "stop", "restart"))
    engine.add_argument("name")
    add_data_dir(engine)


def run(args: argparse.Namespace) -> int | None:
    """Run the command if it is one of ours; None otherwise."""
    if args.command == "engines":
        return client_commands.run_with_broker(args.data_dir, _engines)
    if args.command == "models":
        return client_commands.run_with_broker(args.data_dir, _models)
    if args.command == "pull":
        return client_commands.run_with_broker(
            args.data_dir, lambda peer: _pull(peer, args.engine, args.model), on_push=_show_progress
        )
    if args.command == "engine":
        method = {
            "start": methods.ENGINE_START,
            "stop": methods.ENGINE_STOP,
            "restart": methods.ENGINE_RESTART,
        }[args.operation]
        return client_commands.run_with_broker(
            args.data_dir, lambda peer: _lifecycle(peer, method, args.name)
        )
    return None


async def _engines(peer: RpcPeer) -> int:
    statuses = msgspec.convert(await peer.call(methods.ENGINE_STATUS, {}), list[EngineStatus])
    print(f"{'ENGINE':<10}{'STATE':<15}{'PORT':<7}{'PID':<9}{'SLOTS':<7}{'WANTED':<8}DETAIL")
    for status in statuses:
        state = status.state + (" (adopted)" if status.adopted else "")
        wanted = {True: "on", False: "off", None: "-"}[status.desired]
        detail = status.error or status.binary or "not installed"
        print(
            f"{status.engine:<10}{state:<15}{status.port:<7}{status.pid or '-'!s:<9}"
            f"{status.slots or '-'!s:<7}{wanted:<8}{detail}"
        )
    return exit_codes.OK


async def _models(peer: RpcPeer) -> int:
    models = msgspec.convert(await peer.call(methods.ENGINE_MODELS, timeout=30), EngineModels)
    if not models.by_engine:
        print("no engine is running")
    for engine, names in sorted(models.by_engine.items()):
        loaded = set(models.loaded_by_engine.get(engine, []))
        slots = models.slots_by_engine.get(engine, {})
        for name in names or ["(no models)"]:
            mark = f"loaded, {slots.get(name, '?')} slots" if name in loaded else ""
            print(f"{engine:<10}{name:<40}{mark}")
    return exit_codes.OK


async def _pull(peer: RpcPeer, engine: str, model: str) -> int:
    await peer.call(
        methods.ENGINE_ACTION,
        {"engine": engine, "action": "pull_model", "model": model},
        timeout=None,
    )
    print(f"\n{model} is ready in {engine}")
    return exit_codes.OK


def _show_progress(method: str, params: Any) -> None:
    if method != methods.ENGINE_PULL_PROGRESS:
        return
    progress = msgspec.convert(params, PullProgress)
    if progress.percent is None:
        line = f"{progress.stage}"
    else:
        filled = int(progress.percent / 100 * 30)
        line = f"[{'#' * filled}{'.' * (30 - filled)}] {progress.percent:5.1f}%  {progress.stage}"
    sys.stdout.write("\r" + line[:100].ljust(100))
    sys.stdout.flush()


async def _lifecycle(peer: RpcPeer, method: str, name: str) -> int:
    status = msgspec.convert(await peer.call(method, {"engine": name}, timeout=900), EngineStatus)
    where = f" on port {status.port}" if status.state == "running" else ""
    print(
        f"{status.display_name}: {status.state}{where}"
        + (" (adopted: not started by PAIR)" if status.adopted else "")
    )
    return exit_codes.OK
