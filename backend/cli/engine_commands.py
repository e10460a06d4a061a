"""``pair engines [--verbose]``, ``pair engine status|install|start|stop|restart|update|
versions|set-port|logs|uninstall ENGINE`` and ``pair model load|eject|delete ENGINE MODEL``,
each on this node or, with ``--node``, on another member of the cluster (the broker forwards
the call); the model list, pulls and the Hugging Face search are ``model_commands``."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Awaitable
from typing import Any, TypeVar

from backend.cli import (
    alias_commands,
    client_commands,
    confirm,
    exit_codes,
    load_command,
    model_commands,
)
from backend.cli.engine_format import (
    ENGINE_COLUMNS,
    ModelOperation,
    column_widths,
    describe_model_action,
    describe_state,
    describe_status,
    describe_uninstalled,
    describe_versions,
    engine_row,
    table_line,
)
from backend.cli.node_options import port_number
from backend.cli.node_ref import (
    KnownNode,
    NodeWork,
    add_node_option,
    node_id_of,
    on_node,
    with_node,
)
from backend.cli.progress_bar import ProgressBar
from backend.cli.scheduler_format import scheduler_lines
from backend.cli.spread_format import spread_lines
from backend.protocol import contract, errors, methods
from backend.protocol.contract import Method
from backend.protocol.peer import RpcPeer
from backend.protocol.types.base import EngineName
from backend.protocol.types.engines import (
    EngineActionParams,
    EngineLogsQuery,
    EngineRef,
    EngineSetPort,
    EngineStatus,
    NodeScope,
)
from backend.protocol.types.scheduler import SchedulerState

T = TypeVar("T")
URL_SCHEMES = ("http://", "https://")

# Slightly above the broker's own bounds for a call it forwards to a member (docs/RPC.md), so
# its error naming the member arrives before ours.
LIST_TIMEOUT_S = 45.0
LIFECYCLE_TIMEOUT_S = 900.0
LONG_TIMEOUT_S = 3700.0  # installs, updates and model actions
DEFAULT_LOG_LINES = 200
LIFECYCLE: dict[str, Method[EngineRef, EngineStatus]] = {
    "start": methods.ENGINE_START,
    "stop": methods.ENGINE_STOP,
    "restart": methods.ENGINE_RESTART,
}
INSTALLS: dict[str, Method[EngineRef, EngineStatus]] = {
    "install": methods.ENGINE_INSTALL,
    "update": methods.ENGINE_UPDATE,  # the broker reports an update's progress as an install's
}
ENGINE_OPERATIONS = {
    "status": "show an engine's state, port, process and intent",
    "install": "download and install an engine, with progress",
    "start": "start an engine (or adopt one already running)",
    "stop": "stop an engine PAIR started",
    "restart": "stop and start an engine PAIR started",
    "update": "install an engine's latest version, with progress",
    "versions": "show an engine's installed and latest version",
    "set-port": "move an engine to another port (kept across restarts)",
    "logs": "print the last lines of an engine's output",
    "uninstall": "remove what PAIR installed of an engine; its models stay (asks first)",
}
MODEL_OPERATIONS = {
    "load": ModelOperation("load_model", "is loaded in", "load a model into its engine's memory"),
    "eject": ModelOperation("unload_model", "is ejected from", "unload a model from memory"),
    "delete": ModelOperation("delete_model", "is deleted from", "delete a model (asks first)"),
}


def add_parsers(commands: Any, add_data_dir: Any) -> None:
    """Register the engine and model commands on the ``pair`` parser."""
    engines = commands.add_parser("engines", help="list a node's engines and their state")
    models = commands.add_parser("models", help="list models of a node's running engines")
    pull = commands.add_parser("pull", help="download a model into an engine, with progress")
    engine = commands.add_parser(
        "engine", help="install, run, update or remove an engine; its status, port and logs"
    )
    model = commands.add_parser("model", help="load, eject or delete a model of an engine")
    engines.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also show each engine's scheduler: slots, queues, turn, exclusive operation",
    )
    engine_ops = engine.add_subparsers(dest="operation", metavar="OPERATION", required=True)
    model_ops = model.add_subparsers(dest="operation", metavar="OPERATION", required=True)
    on_engine = {op: engine_ops.add_parser(op, help=text) for op, text in ENGINE_OPERATIONS.items()}
    on_model = {
        op: model_ops.add_parser(op, help=spec.help) for op, spec in MODEL_OPERATIONS.items()
    }
    pull_model = model_ops.add_parser(
        "pull", help="download a model into an engine, with progress (llama.cpp: from a URL)"
    )
    for parser in (pull, pull_model):
        model_commands.configure_pull(parser)
    hub = model_commands.add_hub_parsers(model_ops)
    alias_commands.add_parsers(model_ops, add_data_dir)
    for parser in on_engine.values():
        parser.add_argument("engine", metavar="ENGINE")
    for parser in on_model.values():
        parser.add_argument("engine", metavar="ENGINE")
        parser.add_argument("model", metavar="MODEL")
    load_command.add_across_option(on_model["load"])
    on_engine["set-port"].add_argument("port", metavar="PORT", type=port_number)
    on_engine["logs"].add_argument(
        "--lines",
        metavar="N",
        type=_line_count,
        default=DEFAULT_LOG_LINES,
        help=f"how many of the last lines (default {DEFAULT_LOG_LINES})",
    )
    for parser in (on_engine["uninstall"], on_model["delete"]):
        parser.add_argument("--yes", action="store_true", help="do not ask before doing it")
    for parser in (engines, models, pull, pull_model, *on_engine.values(), *on_model.values()):
        add_data_dir(parser)
        add_node_option(parser)
    for parser in hub:  # Hugging Face is asked through this computer's PAIR service
        add_data_dir(parser)


def _line_count(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of lines") from None
    if count < 1:
        raise argparse.ArgumentTypeError(f"{count} lines: give at least 1")
    return count


def run(args: argparse.Namespace) -> int | None:
    """Run the command if it is one of ours; None otherwise."""
    if args.command == "engines":
        verbose: bool = args.verbose
        return _on_node(args, lambda peer, member: _engines(peer, member, verbose=verbose))
    if args.command == "models":
        return _on_node(args, model_commands.list_models)
    if args.command == "pull":
        return _run_model_pull(args)
    if args.command == "engine":
        return _run_engine(args)
    if args.command == "model":
        return _run_model(args)
    return None


def _on_node(args: argparse.Namespace, work: NodeWork, bar: ProgressBar | None = None) -> int:
    """``work`` on the node ``--node`` names, drawing the engine stream on ``bar`` if given."""
    return client_commands.run_with_broker(
        args.data_dir,
        with_node(args.node, work),
        on_push=bar.on_push if bar is not None else None,
    )


def _confirmed(args: argparse.Namespace, work: NodeWork, action: str, consequence: str) -> int:
    """``work`` on the node ``--node`` names, once the user agreed (or gave ``--yes``)."""
    return confirm.run_confirmed(
        lambda resolved: client_commands.run_with_broker(args.data_dir, resolved),
        args.node,
        work,
        action=action,
        consequence=consequence,
        confirmed=args.yes,
    )


def _run_engine(args: argparse.Namespace) -> int:
    engine: EngineName = EngineName(args.engine)
    if args.operation in INSTALLS:
        bar, method = ProgressBar(engine), INSTALLS[args.operation]
        return _on_node(args, lambda peer, member: _install(peer, method, bar, member), bar)
    if args.operation == "uninstall":
        return _confirmed(
            args,
            lambda peer, member: _uninstall(peer, engine, member),
            f"uninstall {engine}",
            "PAIR removes what it installed; the models stay.",
        )
    return _on_node(args, _engine_work(args, engine))


def _engine_work(args: argparse.Namespace, engine: EngineName) -> NodeWork:
    operation = args.operation
    if operation == "status":
        return lambda peer, member: _status(peer, engine, member)
    if operation == "versions":
        return lambda peer, member: _versions(peer, engine, member)
    if operation == "set-port":
        return lambda peer, member: _set_port(peer, engine, args.port, member)
    if operation == "logs":
        return lambda peer, member: _logs(peer, engine, args.lines, member)
    method = LIFECYCLE[operation]
    return lambda peer, member: _lifecycle(peer, method, engine, member)


def _run_model(args: argparse.Namespace) -> int:
    if args.operation == "pull":
        return _run_model_pull(args)
    if args.operation in alias_commands.OPERATIONS:
        return alias_commands.run(args)
    if args.operation in model_commands.HUB_OPERATIONS:
        return client_commands.run_with_broker(args.data_dir, model_commands.hub_work(args))
    operation: ModelOperation = MODEL_OPERATIONS[args.operation]
    engine, model = EngineName(args.engine), args.model
    try:
        across = load_command.across_names(getattr(args, "across", None))
    except errors.InvalidParams as exc:
        print(f"pair: {exc.message}", file=sys.stderr)
        return exit_codes.USAGE

    def work(peer: RpcPeer, member: KnownNode | None) -> Awaitable[int]:
        return _model(peer, operation, engine, model, member, across)

    if operation.action != "delete_model":
        return _on_node(args, work)
    return _confirmed(
        args, work, f"delete {model} from {engine}", "Its files are removed for good."
    )


def _run_model_pull(args: argparse.Namespace) -> int:
    """``pair model pull`` and ``pair pull``: progress is drawn for the name the model gets."""
    work = model_commands.pull_work(args)
    if isinstance(work, int):
        return work
    bar, pull = work
    return _on_node(args, pull, bar)


async def _engines(peer: RpcPeer, member: KnownNode | None, *, verbose: bool = False) -> int:
    scope = NodeScope(node=node_id_of(member))
    statuses = await contract.call(peer, methods.ENGINE_LIST, scope, timeout=LIST_TIMEOUT_S)
    schedulers = await _schedulers(peer, scope, member) if verbose else None
    rows = [engine_row(status) for status in statuses]
    widths = column_widths(ENGINE_COLUMNS, rows)
    print(table_line([title for title, _ in ENGINE_COLUMNS], widths))
    for status, row in zip(statuses, rows, strict=True):
        print(table_line(row, widths))
        if status.spread is not None:
            print("\n".join(spread_lines(status.spread)))
        scheduler = schedulers.pop(status.engine, None) if schedulers is not None else None
        if scheduler is not None or (schedulers is not None and status.state == "running"):
            print("\n".join(scheduler_lines(scheduler)))
    for engine, scheduler in (schedulers or {}).items():  # an engine the list left out
        print(table_line([engine, "(not listed)"], widths))
        print("\n".join(scheduler_lines(scheduler)))
    return exit_codes.OK


async def _schedulers(
    peer: RpcPeer, scope: NodeScope, member: KnownNode | None
) -> dict[EngineName, SchedulerState] | None:
    """Each engine's scheduler by name; None (and a note) from a broker that has none."""
    try:
        states = await contract.call(peer, methods.ENGINE_SCHEDULER, scope, timeout=LIST_TIMEOUT_S)
    except errors.MethodNotFound:
        print(f"(the PAIR service{on_node(member)} does not report schedulers)", file=sys.stderr)
        return None
    return {state.engine: state for state in states.engines}


async def _install(
    peer: RpcPeer,
    method: Method[EngineRef, EngineStatus],
    bar: ProgressBar,
    member: KnownNode | None,
) -> int:
    params = EngineRef(engine=bar.engine, node=node_id_of(member))
    status = await model_commands.following(
        peer, bar, member, lambda: contract.call(peer, method, params, timeout=LONG_TIMEOUT_S)
    )
    done = "updated" if method is methods.ENGINE_UPDATE else "installed"
    print(describe_state(status, member, f"{done}, "))
    return exit_codes.OK


async def _lifecycle(
    peer: RpcPeer,
    method: Method[EngineRef, EngineStatus],
    engine: EngineName,
    member: KnownNode | None,
) -> int:
    params = EngineRef(engine=engine, node=node_id_of(member))
    try:
        status = await contract.call(peer, method, params, timeout=LIFECYCLE_TIMEOUT_S)
    except errors.NotFound as exc:
        raise with_install_hint(exc, engine, member) from None
    print(describe_state(status, member))
    return exit_codes.OK


def with_install_hint(
    refused: errors.NotFound, engine: EngineName, member: KnownNode | None
) -> errors.NotFound:
    """``refused`` with the command that installs the engine, when not being installed is why."""
    data = refused.data if isinstance(refused.data, dict) else {}
    if data.get("action") != "install":
        return refused
    on_node = f" --node {shlex.quote(member.name)}" if member and not member.here else ""
    return errors.NotFound(
        f"{refused.message}; install it with `pair engine install {engine}{on_node}`", refused.data
    )


async def _status(peer: RpcPeer, engine: EngineName, member: KnownNode | None) -> int:
    params = EngineRef(engine=engine, node=node_id_of(member))
    status = await contract.call(peer, methods.ENGINE_STATUS, params, timeout=LIST_TIMEOUT_S)
    print(describe_status(status, member))
    return exit_codes.OK


async def _uninstall(peer: RpcPeer, engine: EngineName, member: KnownNode | None) -> int:
    params = EngineRef(engine=engine, node=node_id_of(member))
    status = await contract.call(
        peer, methods.ENGINE_UNINSTALL, params, timeout=LIFECYCLE_TIMEOUT_S
    )
    print(describe_uninstalled(status, member))
    return exit_codes.OK


async def _set_port(peer: RpcPeer, engine: EngineName, port: int, member: KnownNode | None) -> int:
    params = EngineSetPort(engine=engine, port=port, node=node_id_of(member))
    status = await contract.call(peer, methods.ENGINE_SET_PORT, params, timeout=LIFECYCLE_TIMEOUT_S)
    print(f"{status.display_name}{on_node(member)}: port {status.port}, {status.state}")
    return exit_codes.OK


async def _logs(peer: RpcPeer, engine: EngineName, lines: int, member: KnownNode | None) -> int:
    query = EngineLogsQuery(engine=engine, lines=lines, node=node_id_of(member))
    logs = await contract.call(peer, methods.ENGINE_LOGS, query, timeout=LIST_TIMEOUT_S)
    if not logs.lines:
        print(f"{engine}{on_node(member)} has written no output yet", file=sys.stderr)
    for line in logs.lines:
        print(line)
    return exit_codes.OK


async def _versions(peer: RpcPeer, engine: EngineName, member: KnownNode | None) -> int:
    params = EngineRef(engine=engine, node=node_id_of(member))
    versions = await contract.call(peer, methods.ENGINE_VERSIONS, params, timeout=LIST_TIMEOUT_S)
    print(describe_versions(versions, member))
    return exit_codes.OK


async def _model(
    peer: RpcPeer,
    operation: ModelOperation,
    engine: EngineName,
    model: str,
    member: KnownNode | None,
    across: list[str] | None = None,
) -> int:
    params = EngineActionParams(
        engine=engine, action=operation.action, model=model, node=node_id_of(member), across=across
    )
    if across is not None:
        print(load_command.describe_loading(params, member), file=sys.stderr)
    result = await contract.call(peer, methods.ENGINE_ACTION, params, timeout=LONG_TIMEOUT_S)
    print(describe_model_action(operation, params, result, member))
    if load_command.reads_where_it_runs(params):
        await load_command.say_where_it_runs(peer, params, member)
    return exit_codes.OK
