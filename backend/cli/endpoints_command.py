"""``pair endpoints``: the real URLs of this node's front doors and how to point clients at them."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from backend.cli import exit_codes
from backend.cli.client_commands import run_with_broker
from backend.common.hostport import url_host
from backend.protocol import contract, methods
from backend.protocol.peer import RpcPeer
from backend.protocol.proxy import door_rank
from backend.protocol.types.broker import BrokerStatus

EVERY_MODEL = "Every door reaches every model of every computer in the cluster, in all three APIs."
# API title, its doors best first (every door speaks it; the port its apps expect comes first),
# its client setting and the URL its clients take (Anthropic's SDK adds /v1/messages itself).
# The OpenAI and Anthropic SDKs refuse to start without an API key; this computer needs none, so
# any value does.
ANY_KEY = "pair"
API_SETTINGS = (
    ("Ollama API", ("ollama", "openai", "llamacpp"), "OLLAMA_HOST={hostport}", "{url}"),
    (
        "OpenAI API",
        ("openai", "llamacpp", "ollama"),
        f"OPENAI_BASE_URL={{url}}/v1 OPENAI_API_KEY={ANY_KEY}",
        "{url}/v1",
    ),
    (
        "Anthropic API",
        ("ollama", "openai", "llamacpp"),
        f"ANTHROPIC_BASE_URL={{url}} ANTHROPIC_API_KEY={ANY_KEY}",
        "{url}",
    ),
)
ANY_KEY_NOTE = (
    f"This computer needs no API key; the SDKs insist on one, so any value does ({ANY_KEY}).",
    "Other computers need LAN access on and a key of their own (`pair api-key create NAME`).",
)
USUAL_PORT_OF = {"ollama": "Ollama", "openai": "LM Studio", "llamacpp": "llama-server"}
EQUAL_DOORS = (
    "The doors are equal; each sits where apps look for Ollama, LM Studio or llama-server."
)


def add_parser(commands: Any, add_data_dir: Callable[[argparse.ArgumentParser], None]) -> None:
    """Register ``pair endpoints``."""
    endpoints = commands.add_parser("endpoints", help="show where clients should connect")
    add_data_dir(endpoints)
    endpoints.add_argument("--json", action="store_true", help="print door: URL as JSON")


def run(args: argparse.Namespace) -> int | None:
    """Run the command if it is this one; ``None`` otherwise."""
    if args.command != "endpoints":
        return None
    return endpoints(args.data_dir, as_json=args.json)


def endpoints(data_dir: str | None, *, as_json: bool) -> int:
    """Print the front doors' URLs (the real ones, also when a port had to move)."""

    async def work(peer: RpcPeer) -> int:
        status = await contract.call(peer, methods.STATUS)
        if as_json:
            sys.stdout.write(msgspec.json.encode(status.front_doors).decode() + "\n")
            return exit_codes.OK
        # Imported here: reading the interfaces loads psutil, which no other command needs.
        from backend.components.discovery.records import interface_addresses, rank_addresses

        print(format_endpoints(status, rank_addresses(interface_addresses())))
        return exit_codes.OK

    return run_with_broker(data_dir, work)


def format_endpoints(status: BrokerStatus, addresses: Sequence[str] = ()) -> str:
    """What every door reaches, one line per client API (URL and client setting), the doors and
    their ports, moved-port notes and the node API at ``addresses`` (where other computers
    reach this one, best first)."""
    doors = status.front_doors
    if not doors:
        return "The front doors are not open yet; try again in a moment."
    order = sorted(doors, key=door_rank)
    apis = []
    for title, preferred, setting, address in API_SETTINGS:
        url = doors[next((door for door in preferred if door in doors), order[0])]
        values = {"url": url, "hostport": url.removeprefix("http://")}
        apis.append((title, address.format(**values), setting.format(**values)))
    width = max(len(url) for _, url, _ in apis) + 2
    lines = [EVERY_MODEL, "", f"{'API':<15}{'URL':<{width}}CLIENT SETTING"]
    lines += [f"{title:<15}{url:<{width}}{setting}" for title, url, setting in apis]
    lines += ["", f"{'DOOR':<10}{'URL':<{width}}THE USUAL PORT OF"]
    lines += [f"{door:<10}{doors[door]:<{width}}{USUAL_PORT_OF.get(door, '')}" for door in order]
    lines += [EQUAL_DOORS, *ANY_KEY_NOTE, ""]
    moved = [e for e in status.errors if e.id.startswith("proxy:port-taken:")]
    lines += [f"note: {entry.message}" for entry in moved]
    lines.append(f"node API  {node_api(status.ports.node, addresses)}")
    return "\n".join(line.rstrip() for line in lines)


def node_api(port: int, addresses: Sequence[str]) -> str:
    """Where other PAIR nodes reach this one's node API (TLS): pairing and node-info."""
    if not addresses:
        return f"port {port} over TLS (this computer has no address other computers can use now)"
    # Imported here: the path's module is the discovery probe, which loads aiohttp's client.
    from backend.components.discovery.probe import NODE_INFO_PATH

    urls = ", ".join(f"https://{url_host(address)}:{port}{NODE_INFO_PATH}" for address in addresses)
    return f"{urls} (other PAIR nodes: pairing and node-info)"
