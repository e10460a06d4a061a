"""``pair model alias NAME TARGET``, ``pair model alias --remove NAME`` and
``pair model aliases``: other names for a model at this computer's front doors.

An alias covers what a weights digest cannot (a model whose file differs, or a short name a
tool expects); it is this computer's: each node's doors have their own.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from backend.cli import exit_codes
from backend.cli.client_commands import run_with_broker
from backend.protocol import contract, methods
from backend.protocol.peer import RpcPeer
from backend.protocol.types.aliases import AliasRef, AliasSet, ModelAlias

OPERATIONS = ("alias", "aliases")
ALIAS_SYNTAX = "pair model alias NAME TARGET` or `pair model alias --remove NAME"


def add_parsers(model_ops: Any, add_data_dir: Callable[[argparse.ArgumentParser], None]) -> None:
    """Register ``pair model alias`` and ``pair model aliases``."""
    alias: argparse.ArgumentParser = model_ops.add_parser(
        "alias",
        help="let another name reach a model at this computer's front doors",
        description="Requests for NAME at this computer's front doors go to the model TARGET."
        " An alias may not stand for another alias.",
    )
    alias.add_argument("name", metavar="NAME", help="the new name (no spaces)")
    alias.add_argument("target", metavar="TARGET", nargs="?", help="the model it reaches")
    alias.add_argument("--remove", action="store_true", help="forget the alias NAME")
    listing: argparse.ArgumentParser = model_ops.add_parser(
        "aliases", help="list this computer's model aliases"
    )
    listing.add_argument("--json", action="store_true", help="print them as JSON")
    add_data_dir(alias)
    add_data_dir(listing)


def run(args: argparse.Namespace) -> int:
    """Run ``pair model alias`` or ``pair model aliases``."""
    if args.operation == "aliases":
        as_json: bool = args.json
        return run_with_broker(args.data_dir, lambda peer: _list(peer, as_json=as_json))
    name: str = args.name
    target: str | None = args.target
    if args.remove == (target is not None):
        print(f"pair: give `{ALIAS_SYNTAX}`", file=sys.stderr)
        return exit_codes.USAGE
    if target is None:
        return run_with_broker(args.data_dir, lambda peer: _remove(peer, name))
    return run_with_broker(args.data_dir, lambda peer: _set(peer, name, target))


async def _set(peer: RpcPeer, name: str, target: str) -> int:
    params = AliasSet(name=name, target=target)
    alias = await contract.call(peer, methods.MODELS_ALIAS_SET, params)
    print(describe_set(alias))
    return exit_codes.OK


async def _remove(peer: RpcPeer, name: str) -> int:
    alias = await contract.call(peer, methods.MODELS_ALIAS_REMOVE, AliasRef(name=name))
    print(f"Removed the alias {alias.name} (it stood for {alias.target}).")
    return exit_codes.OK


async def _list(peer: RpcPeer, *, as_json: bool) -> int:
    aliases = await contract.call(peer, methods.MODELS_ALIASES)
    if as_json:
        print(msgspec.json.encode(aliases).decode())
    else:
        print(format_aliases(aliases, time.time()))
    return exit_codes.OK


def describe_set(alias: ModelAlias) -> str:
    """What a new or re-pointed alias does."""
    return f"{alias.name} now reaches {alias.target} at this computer's front doors."


def format_aliases(aliases: Sequence[ModelAlias], now: float) -> str:
    """One line per alias, by name; an empty list says how to add one."""
    if not aliases:
        return "No model aliases. Add one with `pair model alias NAME TARGET`."
    width = max(len("NAME"), *(len(alias.name) for alias in aliases)) + 2
    target_width = max(len("TARGET"), *(len(alias.target) for alias in aliases)) + 2
    lines = [f"{'NAME':<{width}}{'TARGET':<{target_width}}SET"]
    for alias in aliases:
        lines.append(f"{alias.name:<{width}}{alias.target:<{target_width}}{_ago(now, alias)}")
    return "\n".join(lines)


def _ago(now: float, alias: ModelAlias) -> str:
    seconds = max(0, int(now - alias.created_at))
    if seconds < 60:
        return "just now"
    unit, size = next(
        pair for pair in (("d", 86400), ("h", 3600), ("min", 60)) if seconds >= pair[1]
    )
    return f"{seconds // size} {unit} ago"
