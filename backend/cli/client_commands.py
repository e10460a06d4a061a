"""CLI commands that attach to a running broker over its control socket."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from backend.cli import exit_codes
from backend.cli.replicas_format import replicas_lines
from backend.protocol import contract, errors, methods
from backend.protocol.endpoint import control_address, open_control_connection, resolve_data_dir
from backend.protocol.peer import RpcPeer
from backend.protocol.proxy import door_rank
from backend.protocol.types.broker import BrokerStatus

T = TypeVar("T")


class NoBroker(Exception):
    """Nothing answers on the data dir's control socket."""


PushHandler = Callable[[str, Any], None]


async def _with_broker(
    data_dir: Path, work: Callable[[RpcPeer], Awaitable[T]], on_push: PushHandler | None = None
) -> T:
    address = control_address(data_dir)
    try:
        reader, writer = await open_control_connection(address)
    except OSError as exc:
        raise NoBroker(
            f"no PAIR broker is running for {data_dir} (nothing answers at {address}: "
            f"{exc.strerror or exc}). Start one with `pair node` or `pair`."
        ) from None
    peer = RpcPeer(
        reader,
        writer,
        name="cli",
        on_notification=(lambda m, p, _: on_push(m, p)) if on_push is not None else None,
    )
    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(peer.run(), name="cli:rpc")
            try:
                return await work(peer)
            finally:
                peer.close()
    except ExceptionGroup as group:
        raise group.exceptions[0] from None


def run_with_broker(
    data_dir_arg: str | None,
    work: Callable[[RpcPeer], Awaitable[int]],
    on_push: PushHandler | None = None,
) -> int:
    """Connect to the broker for the data dir, run ``work``, map failures to exit codes."""
    data_dir = resolve_data_dir(data_dir_arg)
    try:
        return asyncio.run(_with_broker(data_dir, work, on_push))
    except NoBroker as exc:
        print(f"pair: {exc}", file=sys.stderr)
        return exit_codes.NOT_RUNNING
    except errors.RpcError as exc:
        print(f"pair: the broker answered with an error: {exc}", file=sys.stderr)
        return exit_codes.ERROR


def status(data_dir: str | None, *, as_json: bool) -> int:
    """``pair status``."""

    async def work(peer: RpcPeer) -> int:
        status = await contract.call(peer, methods.STATUS)
        if as_json:
            sys.stdout.write(msgspec.json.format(msgspec.json.encode(status)).decode() + "\n")
            return exit_codes.OK
        print(format_status(status))
        return exit_codes.OK

    return run_with_broker(data_dir, work)


def stop(data_dir: str | None) -> int:
    """``pair stop``: ask the broker to shut down and wait until it has."""

    async def work(peer: RpcPeer) -> int:
        await contract.call(peer, methods.SHUTDOWN)
        print("PAIR broker is stopping.")
        return exit_codes.OK

    return run_with_broker(data_dir, work)


def format_status(status: BrokerStatus) -> str:
    """The human-readable status table."""
    doors = status.front_doors
    lines = [
        f"PAIR {status.version}  node {status.node_name} ({status.node_id})",
        f"broker      pid {status.pid}, up {_duration(status.uptime_ms / 1000)}",
        f"data dir    {status.data_dir}",
        f"control     {status.control_address}",
        f"log file    {status.log_file or '-'}",
        f"fingerprint {status.fingerprint or '-'}",
        f"cluster     {status.cluster_id or 'not in a cluster (`pair cluster`, `pair invite`)'}",
        f"ports       node {status.ports.node}, ollama {status.ports.ollama}, "
        f"openai {status.ports.openai}, llama.cpp {status.ports.llamacpp}, "
        f"relay {status.ports.relay}",
        "front doors "
        + (", ".join(f"{d} {doors[d]}" for d in sorted(doors, key=door_rank)) or "-"),
        f"placement   {_placement(status.placement)}",
        *replicas_lines(status.replicas, time.time()),
        "",
        f"{'COMPONENT':<14}{'KIND':<8}{'STATE':<10}{'RESTARTS':<10}{'PID':<8}DETAIL",
    ]
    now = time.time()
    for component in status.components:
        detail = component.last_error or ""
        if component.status == "backoff" and component.next_restart_at is not None:
            detail = f"restart in {max(0.0, component.next_restart_at - now):.0f} s; {detail}"
        lines.append(
            f"{component.name:<14}{component.kind:<8}{component.status:<10}"
            f"{component.restarts:<10}{component.pid or '-'!s:<8}{detail}"
        )
    lines.append("")
    if not status.errors:
        lines.append("no open errors")
    for entry in status.errors:
        where = "" if entry.node_id == status.node_id else f" (on {entry.node_id[:8]})"
        lines.append(f"{entry.severity.upper():<8}{entry.id}{where}: {entry.message}")
    return "\n".join(lines)


def _placement(policy: str | None) -> str:
    """The placement policy and what it ranks by (``pair settings set placement_policy``)."""
    explained = {
        "pair": "pair (expected completion: free slots, loaded model, measured speed, affinity)",
        "reference": "reference (pending jobs + GPU pressure + reservations)",
    }
    return explained.get(policy or "", policy or "-")


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"
