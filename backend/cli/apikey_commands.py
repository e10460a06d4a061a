"""``pair api-key create NAME [--admin]``, ``pair api-key list``, ``pair api-key revoke ID``: the
keys that let other computers on the network use this computer's front doors (with
``lan_access`` on).

A key's scope is ``inference`` (the inference APIs and model lists) unless ``--admin`` (or
``--scope admin``) is given: that also opens this computer's engines' own paths through the
doors (pull, delete, create, copy, push, llama-server's slots). The secret is printed once, by
``create``, with how to use it; PAIR keeps only its hash.
"""

from __future__ import annotations

import argparse
import ipaddress
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec

from backend.cli import exit_codes
from backend.cli.client_commands import run_with_broker
from backend.common.hostport import url_host
from backend.protocol import contract, methods
from backend.protocol.peer import RpcPeer
from backend.protocol.types.apikeys import (
    API_KEY_SCOPES,
    ApiKeyCreate,
    ApiKeyCreated,
    ApiKeyId,
    ApiKeyInfo,
    ApiKeyRef,
    ApiKeyScope,
)
from backend.protocol.types.broker import BrokerStatus
from backend.protocol.types.nodes import DiscoveredNode
from backend.protocol.types.settings import SettingsUpdate

COMMAND = "api-key"
NO_ADDRESS = "<this computer's address>"


def add_parser(commands: Any, add_data_dir: Callable[[argparse.ArgumentParser], None]) -> None:
    """Register ``pair api-key`` and its actions."""
    apikey = commands.add_parser(
        COMMAND, help="API keys that let other computers use the front doors"
    )
    actions = apikey.add_subparsers(dest="apikey_action", metavar="ACTION", required=True)
    create = actions.add_parser(
        "create",
        help="create a key and print its secret (only once)",
        description="A key may use the inference APIs and list models; only with --admin may it"
        " also use this computer's engines' own paths (pull, delete, create, copy, push, slots).",
    )
    create.add_argument("name", help="who the key is for (1-64 printable characters)")
    scope = create.add_mutually_exclusive_group()
    scope.add_argument(
        "--admin",
        dest="scope",
        action="store_const",
        const="admin",
        default="inference",
        help="also let it use this computer's engines' own paths (pull, delete, slots...)",
    )
    scope.add_argument(
        "--scope",
        choices=API_KEY_SCOPES,
        default="inference",
        help="what the key may do (default: inference, the inference APIs and model lists)",
    )
    listing = actions.add_parser("list", help="list the keys (never their secrets)")
    listing.add_argument("--json", action="store_true", help="print them as JSON")
    revoke = actions.add_parser("revoke", help="revoke a key: refused at once")
    revoke.add_argument("id", help="the key's id (see `pair api-key list`)")
    lan = actions.add_parser("lan", help="let other computers use the front doors with a key")
    lan.add_argument("state", choices=("on", "off"))
    for parser in (create, listing, revoke, lan):
        add_data_dir(parser)


def run(args: argparse.Namespace) -> int | None:
    """Run the command if it is this one; ``None`` otherwise."""
    if args.command != COMMAND:
        return None
    if args.apikey_action == "create":
        return run_with_broker(args.data_dir, lambda peer: _create(peer, args.name, args.scope))
    if args.apikey_action == "list":
        return run_with_broker(args.data_dir, lambda peer: _list(peer, as_json=args.json))
    if args.apikey_action == "lan":
        return run_with_broker(args.data_dir, lambda peer: _lan(peer, on=args.state == "on"))
    return run_with_broker(args.data_dir, lambda peer: _revoke(peer, ApiKeyId(args.id)))


async def _create(peer: RpcPeer, name: str, scope: ApiKeyScope) -> int:
    # Everything the message needs is asked first: once the key exists, nothing may fail
    # before its secret is printed (it cannot be shown again).
    status = await contract.call(peer, methods.STATUS)
    nodes = await contract.call(peer, methods.DISCOVERY_GET_NODES)
    settings = await contract.call(peer, methods.SETTINGS_GET)
    lan_access = settings.values.get("lan_access") is True
    address = lan_address(nodes, _interface_addresses())
    create = ApiKeyCreate(name=name, scope=scope)
    created = await contract.call(peer, methods.APIKEYS_CREATE, create)
    print(format_created(created, status, address, lan_access=lan_access))
    return exit_codes.OK


async def _lan(peer: RpcPeer, *, on: bool) -> int:
    update = SettingsUpdate(values={"lan_access": on})
    await contract.call(peer, methods.SETTINGS_SET, update)
    if on:
        print("LAN access is on: other computers may use the front doors with an API key")
        print("(create one with `pair api-key create NAME`); this computer needs none.")
    else:
        print("LAN access is off: only this computer may use the front doors.")
    return exit_codes.OK


async def _list(peer: RpcPeer, *, as_json: bool) -> int:
    keys = await contract.call(peer, methods.APIKEYS_LIST)
    if as_json:
        print(msgspec.json.encode(keys).decode())
    else:
        print(format_keys(keys, time.time()))
    return exit_codes.OK


async def _revoke(peer: RpcPeer, key_id: ApiKeyId) -> int:
    key = await contract.call(peer, methods.APIKEYS_REVOKE, ApiKeyRef(id=key_id))
    print(f"Revoked API key {key.id} ({key.name}, {key.prefix}…); it is refused from now on.")
    return exit_codes.OK


def lan_address(
    nodes: Sequence[DiscoveredNode], interfaces: Mapping[str, Sequence[str]]
) -> str | None:
    """Where other computers reach this one: the first address discovery advertises for it,
    else the best of its interfaces' (the CLI runs on the broker's computer), else None."""
    for node in nodes:
        if "self" in node.sources:
            for address in node.addresses:
                if not _is_loopback(address):
                    return address
    # Imported here, as in _interface_addresses: no other command needs discovery's helpers.
    from backend.components.discovery.records import rank_addresses

    ranked = rank_addresses(interfaces)
    return ranked[0] if ranked else None


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return address == "localhost"


def _interface_addresses() -> dict[str, list[str]]:
    # Imported here: reading the interfaces loads psutil, which the other commands never need.
    from backend.components.discovery.records import interface_addresses

    return interface_addresses()


def format_created(
    created: ApiKeyCreated, status: BrokerStatus, address: str | None, *, lan_access: bool
) -> str:
    """The new secret, said once, with the settings a client on another computer uses."""
    host = url_host(address or NO_ADDRESS)
    secret = created.secret
    lines = [
        f"Created API key {created.key.id} ({created.key.name}, {_scope_text(created.key)})."
        " Its secret, shown only this once (PAIR keeps only its hash):",
        "",
        f"    {secret}",
        "",
        "On the other computer:",
        f"  Ollama clients   OLLAMA_HOST=http://{host}:{status.ports.ollama}",
        f"                   with the header  Authorization: Bearer {secret}",
        f"  OpenAI clients   OPENAI_BASE_URL=http://{host}:{status.ports.openai}/v1"
        f"  OPENAI_API_KEY={secret}",
        f"  Anthropic clients  ANTHROPIC_BASE_URL=http://{host}:{status.ports.ollama}"
        f"  ANTHROPIC_API_KEY={secret}",
        "  (every door reaches every model of every computer, in all three APIs)",
    ]
    if not lan_access:
        lines += [
            "",
            "note: LAN access is off, so other computers are refused until you turn it on:"
            " `pair api-key lan on`.",
        ]
    return "\n".join(lines)


def format_keys(keys: Sequence[ApiKeyInfo], now: float) -> str:
    """One line per key, oldest first."""
    if not keys:
        return "No API keys. Create one with `pair api-key create NAME`."
    lines = [f"{'ID':<10}{'NAME':<30}{'PREFIX':<12}{'SCOPE':<11}{'CREATED':<12}LAST USED"]
    for key in keys:
        used = _ago(now - key.last_used_at) if key.last_used_at is not None else "never"
        lines.append(
            f"{key.id:<10}{key.name[:29]:<30}{key.prefix + '…':<12}{key.scope:<11}"
            f"{_ago(now - key.created_at):<12}{used}"
        )
    return "\n".join(lines)


def _scope_text(key: ApiKeyInfo) -> str:
    if key.scope == "admin":
        return "admin: inference, model lists and this computer's engines' own paths"
    return "inference and model lists only; `--admin` for the engines' own paths"


def _ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit} ago"
    return "just now"
