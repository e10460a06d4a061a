"""``pair endpoints``: the real URLs of this node's front doors and how to point clients at them."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

import msgspec

from backend.cli import exit_codes
from backend.cli.client_commands import run_with_broker
from backend.protocol import contract, methods
from backend.protocol.peer import RpcPeer
from backend.protocol.types.broker import BrokerStatus

DOOR_APIS = {
    "ollama": ("Ollama API (+ OpenAI /v1, Anthropic /v1/messages)", "OLLAMA_HOST={hostport}"),
    "openai": ("OpenAI API, LM Studio's models", "OPENAI_BASE_URL={url}/v1"),
    "llamacpp": ("OpenAI API, llama-server's models", "OPENAI_BASE_URL={url}/v1"),
}


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
        print(format_endpoints(status))
        return exit_codes.OK

    return run_with_broker(data_dir, work)


def format_endpoints(status: BrokerStatus) -> str:
    """One line per open door: URL, API, and the client setting that uses it."""
    if not status.front_doors:
        return "The front doors are not open yet; try again in a moment."
    lines = [f"{'DOOR':<10}{'URL':<26}{'SPEAKS':<50}CLIENT SETTING"]
    for door, url in sorted(status.front_doors.items()):
        speaks, setting = DOOR_APIS.get(door, ("", ""))
        hostport = url.removeprefix("http://")
        lines.append(f"{door:<10}{url:<26}{speaks:<50}{setting.format(url=url, hostport=hostport)}")
    moved = [e for e in status.errors if e.id.startswith("proxy:port-taken:")]
    lines += ["", *(f"note: {entry.message}" for entry in moved)]
    lines.append(f"node API  http://0.0.0.0:{status.ports.node}/v1/node-info (other PAIR nodes)")
    return "\n".join(line for line in lines if line or moved)
