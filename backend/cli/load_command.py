"""``pair model load ENGINE MODEL --across NODE[,NODE...]``: spread a llama.cpp model over
those members as well as the computer that loads it (docs/SPLIT.md). The broker resolves the
names and refuses unknown or unreachable members; the CLI refuses an empty list before sending,
says what it does while the load runs, and afterwards where the model runs."""

from __future__ import annotations

import argparse
import sys

from backend.cli.node_ref import KnownNode, node_id_of, on_node
from backend.cli.spread_format import describe_loaded_spread
from backend.protocol import contract, errors, methods
from backend.protocol.peer import RpcPeer
from backend.protocol.types.base import EngineName
from backend.protocol.types.engines import EngineActionParams, EngineRef

# The one engine whose load can spread a model, so the one whose status is read after a load
# (a load without --across spreads too when no single computer has room).
SPREADING_ENGINE = EngineName("llamacpp")
STATUS_TIMEOUT_S = 45.0  # above the broker's own bound for a call it forwards to a member


def add_across_option(load: argparse.ArgumentParser) -> None:
    """``--across NODE[,NODE...]`` on ``pair model load`` (it may also be given again)."""
    load.add_argument(
        "--across",
        metavar="NODE[,NODE...]",
        action="append",
        help="spread a llama.cpp model over these members (names or ids) as well as the "
        "computer that loads it",
    )


def across_names(given: list[str] | None) -> list[str] | None:
    """The member names ``--across`` gives, comma-separated or repeated; None without it.
    ``InvalidParams`` for an empty list or an empty name."""
    if given is None:
        return None
    names = [name.strip() for value in given for name in value.split(",")]
    if not any(names):
        raise errors.InvalidParams("--across needs at least one member name")
    if not all(names):
        written = ",".join(given)
        raise errors.InvalidParams(
            f"--across {written!r} has an empty member name: separate names with one comma"
        )
    return names


def describe_loading(params: EngineActionParams, member: KnownNode | None) -> str:
    """What a spread load is doing while the call runs (a large model takes minutes)."""
    others = ", ".join(params.across or [])
    return (
        f"Loading {params.model} into {params.engine}{on_node(member)}, spread over {others} "
        "as well: PAIR plans each member's share and sends it its layers…"
    )


def reads_where_it_runs(params: EngineActionParams) -> bool:
    """Whether a load is followed by reading where the model runs."""
    return params.action == "load_model" and (
        params.across is not None or params.engine == SPREADING_ENGINE
    )


async def say_where_it_runs(
    peer: RpcPeer, params: EngineActionParams, member: KnownNode | None
) -> None:
    """After a load, say which members hold which share of a spread model; for a load asked
    to spread that runs on one computer after all, say so. A status that cannot be read is
    noted on stderr: the load itself succeeded."""
    ref = EngineRef(engine=params.engine, node=node_id_of(member))
    try:
        status = await contract.call(peer, methods.ENGINE_STATUS, ref, timeout=STATUS_TIMEOUT_S)
    except errors.RpcError as exc:
        print(f"pair: where {params.model} runs could not be read: {exc.message}", file=sys.stderr)
        return
    spread = status.spread
    if spread is not None and spread.model == params.model:
        print(describe_loaded_spread(spread))
    elif params.across is not None:
        where = member.name if member is not None else "this computer"
        print(f"{params.model} runs on {where} alone: no other member took a share")
