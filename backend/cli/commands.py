"""``pair``'s whole command line: parses the arguments and runs the chosen command (``main.py``
sends a worker's start straight to ``worker_command.py``, which imports none of this).

The parser is built from light modules: a client command (``pair status``, ``pair models``...)
loads the wire types and the RPC client, never the broker, its components or aiohttp's server,
which only ``pair node`` needs (``foreground_command``, imported when a node runs)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Callable, Sequence

from backend.cli import (
    apikey_commands,
    client_commands,
    cluster_commands,
    demo_command,
    emulate_command,
    endpoints_command,
    engine_commands,
    jobs_command,
    node_list_commands,
    settings_command,
    worker_command,
)
from backend.cli.display import has_display
from backend.cli.node_options import add_data_dir, add_node_options
from backend.cli.run_gui import RunGui
from backend.cli.version_option import ShowVersion

EPILOG = """\
exit codes: 0 ok, 1 error, 2 usage, 3 a broker already runs for the data dir,
4 no broker runs for the data dir.
"""


def build_parser() -> argparse.ArgumentParser:
    """The whole command line."""
    parser = argparse.ArgumentParser(
        prog="pair",
        description="PAIR, the Personal AI Router. Without a command: the desktop app where a "
        "display exists, otherwise a headless node.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=ShowVersion)
    add_node_options(parser)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    node = commands.add_parser("node", help="run this computer's node headless, in the foreground")
    add_node_options(node)
    node.add_argument(
        "--stdio",
        action="store_true",
        help="also serve JSON-RPC on stdin/stdout; stdin EOF stops the node",
    )
    # Development only: also supervise backend.devtools.testworker in MODE.
    node.add_argument("--test-worker", metavar="MODE", help=argparse.SUPPRESS)
    worker_command.add_parser(commands)
    status = commands.add_parser("status", help="show the local broker's state")
    add_data_dir(status)
    status.add_argument("--json", action="store_true", help="print the raw status as JSON")
    stop = commands.add_parser("stop", help="stop the local broker")
    add_data_dir(stop)
    engine_commands.add_parsers(commands, add_data_dir)
    node_list_commands.add_parsers(commands, node, add_data_dir)
    jobs_command.add_parser(commands, add_data_dir)
    endpoints_command.add_parser(commands, add_data_dir)
    apikey_commands.add_parser(commands, add_data_dir)
    settings_command.add_parser(commands, add_data_dir)
    cluster_commands.add_parsers(commands, add_data_dir)
    emulate_command.add_parser(commands)
    demo_command.add_parser(commands)
    return parser


def dispatch(argv: Sequence[str] | None, run_gui: RunGui | None) -> int:
    """Parse ``argv`` (``None``: this process's arguments) and run the command it names."""
    args = build_parser().parse_args(argv)
    if args.command == worker_command.COMMAND:
        return worker_command.run_worker(args.worker_name, args.worker_args)
    if args.command == "status":
        return client_commands.status(args.data_dir, as_json=args.json)
    if args.command == "stop":
        return client_commands.stop(args.data_dir)
    handled = engine_commands.run(args)
    if handled is not None:
        return handled
    handled = node_list_commands.run(args)
    if handled is not None:
        return handled
    handled = jobs_command.run(args)
    if handled is None:
        handled = endpoints_command.run(args)
    if handled is None:
        handled = apikey_commands.run(args)
    if handled is None:
        handled = settings_command.run(args)
    if handled is None:
        handled = cluster_commands.run(args)
    if handled is not None:
        return handled
    if args.command == "node":
        return _run_node(args)
    if args.command == "emulate":
        return emulate_command.run(args)
    if args.command == "demo":
        return demo_command.run(args)
    if has_display():
        return _exec_gui(list(argv) if argv is not None else sys.argv[1:], run_gui)
    print(
        "No display found: running the headless node. `pair node --help` for options.",
        file=sys.stderr,
    )
    args.stdio = False
    args.test_worker = None
    return _run_node(args)


def _run_node(args: argparse.Namespace) -> int:
    # Imported here: only a node loads the broker and every component.
    from backend.cli import foreground_command

    return foreground_command.run(args)


def _exec_gui(  # noqa: RET503 - execv
    argv: list[str],
    run_gui: RunGui | None,
    *,
    sys_platform: str = sys.platform,
    call: Callable[[list[str]], int] = subprocess.call,
) -> int:
    if run_gui is not None:
        return run_gui(argv)
    command = [sys.executable, "-m", "app", *argv]
    if sys_platform == "win32":
        # Windows has no exec: the app runs as a child and its exit code is passed on.
        return call(command)
    os.execv(sys.executable, command)
