"""``pair join``: let other computers invite this one, for a few minutes.

A computer takes invites only while its user has asked to join (docs/CLUSTER.md, "Pairing");
every other invite is answered ``not-accepting`` and shows nothing here. ``pair join`` opens
that window (10 minutes by default) and says until when; ``pair join --close`` closes it. A
successful pairing closes it too.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from backend.cli import exit_codes
from backend.cli.client_commands import run_with_broker
from backend.cli.cluster_format import format_join_window
from backend.components.cluster.admission import DEFAULT_WINDOW_MINUTES, MAX_WINDOW_MINUTES
from backend.protocol import contract, errors, methods
from backend.protocol.peer import RpcPeer
from backend.protocol.types.cluster import JoinWindow, JoinWindowParams

CLOSED = "This computer does not accept invites now (`pair join` opens it again)."


def add_parser(commands: Any, add_data_dir: Callable[[argparse.ArgumentParser], None]) -> None:
    """Register ``pair join``."""
    join = commands.add_parser(
        "join", help="let another computer invite this one (for a few minutes)"
    )
    join.add_argument(
        "--minutes",
        type=_minutes,
        default=DEFAULT_WINDOW_MINUTES,
        help=f"how long to accept invites, 1 to {MAX_WINDOW_MINUTES:g} (default "
        f"{DEFAULT_WINDOW_MINUTES:g})",
    )
    join.add_argument("--close", action="store_true", help="stop accepting invites now")
    add_data_dir(join)


def _minutes(text: str) -> float:
    try:
        minutes = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of minutes: {text!r}") from None
    if not 1.0 <= minutes <= MAX_WINDOW_MINUTES:
        raise argparse.ArgumentTypeError(f"1 to {MAX_WINDOW_MINUTES:g} minutes")
    return minutes


def run(args: argparse.Namespace) -> int | None:
    """Run ``pair join`` if it is the command; ``None`` otherwise."""
    if args.command != "join":
        return None
    return join(args.data_dir, args.minutes, close=args.close)


def join(data_dir: str | None, minutes: float, *, close: bool) -> int:
    """``pair join``: open (or close) this computer's join window and say how long it stays."""

    async def work(peer: RpcPeer) -> int:
        if close:
            await contract.call(peer, methods.CLUSTER_CLOSE_JOIN_WINDOW)
            print(CLOSED)
            return exit_codes.OK
        try:
            state = await contract.call(
                peer, methods.CLUSTER_OPEN_JOIN_WINDOW, JoinWindowParams(minutes=minutes)
            )
        except errors.InvalidParams as exc:
            print(f"pair join: {exc}")
            return exit_codes.USAGE
        assert state.window is not None
        print(describe_open(state.window, time.time()))
        return exit_codes.OK

    return run_with_broker(data_dir, work)


def describe_open(window: JoinWindow, now: float) -> str:
    """What ``pair join`` prints: how long invites are accepted, and what to do next."""
    return (
        f"This computer accepts invites for {format_join_window(window, now)}.\n"
        "On the other computer run `pair invite ADDRESS` with this computer's address (or use "
        "“Add a computer…” in its PAIR window),\nthen type the PIN it shows here with "
        "`pair accept`. `pair join --close` stops accepting sooner."
    )
