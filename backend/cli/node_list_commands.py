"""``pair nodes``, ``pair node add ADDRESS`` and ``pair node remove ID``: the node list and
manual nodes of the running broker (``pair node`` alone runs the broker: ``foreground_command``)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

import msgspec

from backend.cli import exit_codes
from backend.cli.client_commands import run_with_broker
from backend.common.hostport import DEFAULT_PORT, AddressError, parse_host_port, parse_port
from backend.protocol import contract, methods
from backend.protocol.peer import RpcPeer
from backend.protocol.types.base import ManualNodeId
from backend.protocol.types.nodes import DiscoveredNode, ManualNode, ManualNodeAdd, ManualNodeRef


def add_parsers(
    commands: Any,
    node: argparse.ArgumentParser,
    add_data_dir: Callable[[argparse.ArgumentParser], None],
) -> None:
    """Register ``nodes`` and the ``add``/``remove`` actions under ``node``."""
    nodes = commands.add_parser("nodes", help="list the nodes this node knows (found and manual)")
    add_data_dir(nodes)
    nodes.add_argument("--json", action="store_true", help="print the raw list as JSON")
    actions = node.add_subparsers(dest="node_action", metavar="ACTION")
    add = actions.add_parser("add", help="add a node by address or hostname (VPN addresses too)")
    add.add_argument(
        "address",
        help="IP address or hostname, with an optional :PORT (IPv6 with a port: [addr]:PORT)",
    )
    add.add_argument(
        "--port",
        type=_port_option,
        help=f"its node API port, or a bare engine's port (default {DEFAULT_PORT})",
    )
    add.add_argument("--name", help="a display name")
    _add_action_data_dir(add)
    remove = actions.add_parser("remove", help="remove a manual node (ID from `pair nodes`)")
    remove.add_argument("id", help="the manual node's id, e.g. manual:10.0.0.5:14320")
    _add_action_data_dir(remove)


def _port_option(text: str) -> int:
    try:
        return parse_port(text)
    except AddressError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_action_data_dir(parser: argparse.ArgumentParser) -> None:
    # SUPPRESS keeps `pair node --data-dir X add ...` working: the action's default would
    # otherwise overwrite the value parsed before it.
    parser.add_argument(
        "--data-dir", metavar="DIR", default=argparse.SUPPRESS, help="the node's data directory"
    )


def run(args: argparse.Namespace) -> int | None:
    """Run the command if it is one of these; ``None`` otherwise."""
    if args.command == "nodes":
        return list_nodes(args.data_dir, as_json=args.json)
    if args.command == "node" and getattr(args, "node_action", None) == "add":
        return add_node(args.data_dir, args.address, args.port, args.name)
    if args.command == "node" and getattr(args, "node_action", None) == "remove":
        return remove_node(args.data_dir, args.id)
    return None


def list_nodes(data_dir: str | None, *, as_json: bool) -> int:
    """``pair nodes``."""

    async def work(peer: RpcPeer) -> int:
        found = await contract.call(peer, methods.DISCOVERY_GET_NODES)
        manual = await contract.call(peer, methods.NODES_LIST)
        if as_json:
            document = {"nodes": found, "manual": manual}
            print(msgspec.json.format(msgspec.json.encode(document)).decode())
            return exit_codes.OK
        print(format_nodes(found, manual))
        return exit_codes.OK

    return run_with_broker(data_dir, work)


def add_node(data_dir: str | None, address: str, port: int | None, name: str | None) -> int:
    """``pair node add``: ``ADDRESS[:PORT]`` and ``--port``, checked before the broker is asked."""
    try:
        host, node_port = parse_host_port(address, DEFAULT_PORT, port=port)
    except AddressError as exc:
        print(f"pair node add: {exc}", file=sys.stderr)
        return exit_codes.USAGE

    async def work(peer: RpcPeer) -> int:
        params = ManualNodeAdd(address=host, port=node_port, name=name or None)
        added = await contract.call(peer, methods.NODE_ADD, params)
        print(f"added {added.id}; it is probed every 10 s (see `pair nodes`)")
        return exit_codes.OK

    return run_with_broker(data_dir, work)


def remove_node(data_dir: str | None, node_id: str) -> int:
    """``pair node remove``."""

    async def work(peer: RpcPeer) -> int:
        await contract.call(peer, methods.NODE_REMOVE, ManualNodeRef(id=ManualNodeId(node_id)))
        print(f"removed {node_id}")
        return exit_codes.OK

    return run_with_broker(data_dir, work)


def format_nodes(nodes: list[DiscoveredNode], manual: list[ManualNode]) -> str:
    """The human-readable node table, then the manual entries."""
    now = time.time()
    lines = [f"{'NODE':<38}{'NAME':<20}{'VIA':<13}{'STATE':<12}{'SEEN':<8}{'ADDRESS':<18}MODELS"]
    for node in nodes:
        seen = f"{max(0.0, now - node.last_seen):.0f}s" if node.last_seen else "-"
        models = sorted({m for engine in node.engines.values() for m in engine.models or []})
        lines.append(
            f"{node.node_id:<38}{node.name[:19]:<20}{','.join(node.sources):<13}"
            f"{'reachable' if node.reachable else 'unreachable':<12}{seen:<8}"
            f"{(node.addresses[0] if node.addresses else '-'):<18}{', '.join(models) or '-'}"
        )
    if manual:
        lines += ["", f"{'MANUAL ID':<40}{'STATE':<13}{'FAILURES':<10}DETAIL"]
        for entry in manual:
            detail = entry.node_id or ""
            if entry.last_error and entry.failures:
                detail = entry.last_error
            lines.append(f"{entry.id:<40}{entry.state:<13}{entry.failures:<10}{detail}")
    return "\n".join(lines)
