"""``pair engines``, ``pair models``, ``pair pull``, ``pair engine start|stop|restart``."""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from backend.cli import client_commands, exit_codes
from backend.protocol import contract, methods
from backend.protocol.contract import Method
from backend.protocol.peer import RpcPeer
from backend.protocol.types import (
    EngineActionParams,
    EngineName,
    EngineRef,
    EngineStatus,
    PullProgress,
    PullProgressed,
)


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
        progress = PullBar(EngineName(args.engine), args.model)
        return client_commands.run_with_broker(
            args.data_dir,
            lambda peer: _pull(peer, EngineName(args.engine), args.model),
            on_push=progress.on_push,
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
    statuses = await contract.call(peer, methods.ENGINE_LIST)
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
    models = await contract.call(peer, methods.ENGINE_MODELS, timeout=30)
    if not models.by_engine:
        print("no engine is running")
    for engine, names in sorted(models.by_engine.items()):
        loaded = set(models.loaded_by_engine.get(engine, []))
        slots = models.slots_by_engine.get(engine, {})
        for name in names or ["(no models)"]:
            mark = f"loaded, {slots.get(name, '?')} slots" if name in loaded else ""
            print(f"{engine:<10}{name:<40}{mark}")
    return exit_codes.OK


async def _pull(peer: RpcPeer, engine: EngineName, model: str) -> int:
    await contract.call(peer, methods.ENGINE_SUBSCRIBE)  # progress arrives as engine events
    params = EngineActionParams(engine=engine, action="pull_model", model=model)
    await contract.call(peer, methods.ENGINE_ACTION, params, timeout=None)
    print(f"\n{model} is ready in {engine}")
    return exit_codes.OK


class PullBar:
    """Draws one pull's progress from the ``engine:event`` pushes of the engine stream."""

    def __init__(self, engine: EngineName, model: str, out: TextIO = sys.stdout) -> None:
        self._engine, self._model, self._out = engine, model, out

    def on_push(self, method: str, params: Any) -> None:
        """The CLI connection's push hook: draw this pull's progress, ignore the rest."""
        if method != methods.ENGINE_EVENT.name:
            return
        event = methods.ENGINE_EVENT.decode(params)
        if not isinstance(event, PullProgressed):
            return
        progress = event.progress
        if (progress.engine, progress.model) != (self._engine, self._model):
            return
        self._out.write("\r" + progress_line(progress)[:100].ljust(100))
        self._out.flush()


def progress_line(progress: PullProgress) -> str:
    """A 30-character bar, the percentage and the stage (the stage alone when unmeasured)."""
    if progress.percent is None:
        return progress.stage
    filled = int(progress.percent / 100 * 30)
    return f"[{'#' * filled}{'.' * (30 - filled)}] {progress.percent:5.1f}%  {progress.stage}"


async def _lifecycle(peer: RpcPeer, method: Method[EngineRef, EngineStatus], name: str) -> int:
    params = EngineRef(engine=EngineName(name))
    status = await contract.call(peer, method, params, timeout=900)
    where = f" on port {status.port}" if status.state == "running" else ""
    print(
        f"{status.display_name}: {status.state}{where}"
        + (" (adopted: not started by PAIR)" if status.adopted else "")
    )
    return exit_codes.OK
