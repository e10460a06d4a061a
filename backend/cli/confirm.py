"""Asking before a command that cannot be undone. ``--yes`` skips the question; without a
terminal to ask on (a script, a pipe) the command refuses with a usage error rather than guess.

The question is asked between connections, never inside the event loop: asyncio's Ctrl+C
handler would swallow the interrupt of a blocking ``input``."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable

from backend.cli import exit_codes
from backend.cli.node_ref import KnownNode, NodeWork, on_node, with_node
from backend.protocol.peer import RpcPeer

Ask = Callable[[str], str]
Runner = Callable[[Callable[[RpcPeer], Awaitable[int]]], int]


def agreed(ask: Ask, question: str) -> bool:
    """Whether the answer to ``question`` is yes; end of input or Ctrl+C is a no."""
    try:
        return ask(question).strip().lower() in ("y", "yes")
    except (EOFError, KeyboardInterrupt):
        print(file=sys.stderr)
        return False


def run_confirmed(
    run: Runner,
    given: str | None,
    work: NodeWork,
    *,
    action: str,
    consequence: str,
    confirmed: bool,
) -> int:
    """``work`` for the node ``--node`` names (``given``) once the user agreed to ``action``
    (``delete phi3:mini from ollama``), or at once with ``confirmed`` (``--yes``). ``run`` runs
    one connection's work and returns its exit code."""
    if not confirmed and not sys.stdin.isatty():
        where = f" on {given}" if given is not None else ""
        print(
            f"pair: refusing to {action}{where} without confirmation: there is no terminal to "
            "ask on (pass --yes to confirm)",
            file=sys.stderr,
        )
        return exit_codes.USAGE
    if confirmed:
        return run(with_node(given, work))
    resolved: list[KnownNode | None] = []

    async def resolve(_: RpcPeer, member: KnownNode | None) -> int:
        resolved.append(member)
        return exit_codes.OK

    code = run(with_node(given, resolve))  # an unknown node or no broker: nothing is asked
    if code != exit_codes.OK:
        return code
    member = resolved[0]
    question = f"{action[:1].upper()}{action[1:]}{on_node(member)}? {consequence} [y/N] "
    if not agreed(input, question):
        print(f"Did not {action}{on_node(member)} (`--yes` skips the question).", file=sys.stderr)
        return exit_codes.ERROR
    return run(lambda peer: work(peer, member))
