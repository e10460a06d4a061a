"""``pair settings list``: the broker's settings; ``pair settings set KEY VALUE`` changes one
(checked by the broker; a door port moves the door at once)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from backend.cli import exit_codes
from backend.cli.client_commands import run_with_broker
from backend.protocol import contract, errors, methods
from backend.protocol.peer import RpcPeer
from backend.protocol.types.settings import (
    SettingSpec,
    SettingsSnapshot,
    SettingsUpdate,
    SettingValue,
)


def add_parser(commands: Any, add_data_dir: Callable[[argparse.ArgumentParser], None]) -> None:
    """Register ``pair settings`` and ``pair settings set``."""
    settings = commands.add_parser("settings", help="show or change the node's settings")
    actions = settings.add_subparsers(dest="settings_action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="every setting, its value and what it does")
    change = actions.add_parser("set", help="change one setting (the broker checks it)")
    change.add_argument("key", help="the setting, as `pair settings list` shows it")
    change.add_argument("value", help="its new value (true/false for a switch)")
    for parser in (listing, change):
        add_data_dir(parser)


def run(args: argparse.Namespace) -> int | None:
    """Run the command if it is this one; ``None`` otherwise."""
    if args.command != "settings":
        return None
    if args.settings_action == "set":
        return set_setting(args.data_dir, args.key, args.value)
    return show(args.data_dir)


def show(data_dir: str | None) -> int:
    """Print every setting with its value and what it does."""

    async def work(peer: RpcPeer) -> int:
        print(format_settings(await contract.call(peer, methods.SETTINGS_GET)))
        return exit_codes.OK

    return run_with_broker(data_dir, work)


def set_setting(data_dir: str | None, key: str, text: str) -> int:
    """Change ``key`` to ``text`` read as the schema's type; the broker's refusal is printed."""

    async def work(peer: RpcPeer) -> int:
        snapshot = await contract.call(peer, methods.SETTINGS_GET)
        spec = next((s for s in snapshot.schema if s.key == key), None)
        if spec is None:
            known = ", ".join(s.key for s in snapshot.schema)
            print(f"pair: no setting {key!r}; known settings: {known}", file=sys.stderr)
            return exit_codes.USAGE
        try:
            value = parse_value(spec, text)
        except ValueError as exc:
            print(f"pair: {exc}", file=sys.stderr)
            return exit_codes.USAGE
        try:
            saved = await contract.call(
                peer, methods.SETTINGS_SET, SettingsUpdate(values={key: value})
            )
        except (errors.InvalidParams, errors.Conflict) as exc:
            print(f"pair: {exc.message.removeprefix('Invalid params: ')}", file=sys.stderr)
            return exit_codes.ERROR
        print(f"{key} = {_shown(saved.values.get(key))}")
        return exit_codes.OK

    return run_with_broker(data_dir, work)


def parse_value(spec: SettingSpec, text: str) -> SettingValue:
    """``text`` as the value ``spec`` takes (the broker checks ranges and choices)."""
    if spec.type == "bool":
        words = {"true": True, "on": True, "yes": True, "false": False, "off": False, "no": False}
        if text.lower() not in words:
            raise ValueError(f"{spec.key} is a switch: give true or false, not {text!r}")
        return words[text.lower()]
    try:
        if spec.type == "int":
            return int(text)
        if spec.type == "float":
            return float(text)
    except ValueError:
        kind = "a whole number" if spec.type == "int" else "a number"
        raise ValueError(f"{spec.key} takes {kind}, not {text!r}") from None
    return text


def format_settings(snapshot: SettingsSnapshot) -> str:
    """One line per setting: key, value, and what it does."""
    width = max((len(spec.key) for spec in snapshot.schema), default=0) + 2
    lines = []
    for spec in snapshot.schema:
        value = _shown(snapshot.values.get(spec.key, spec.default))
        lines.append(f"{spec.key:<{width}}{value:<14}{spec.description}")
    return "\n".join(lines)


def _shown(value: SettingValue | None) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value) if value == "" else value
    return "" if value is None else f"{value:g}" if isinstance(value, float) else str(value)
