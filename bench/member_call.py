"""What a call aimed at another member costs: two real paired brokers on this computer.

    .venv/bin/python bench/member_call.py [--calls 300]

Starts two brokers (temporary data dirs, free ports, keys in files), pairs them with a PIN,
waits for A's member link to B, then times ``engine:list`` on A's control socket for A itself
and with ``node`` = B (forwarded over the link: mutual TLS, a WebSocket, B's own dispatcher),
one call at a time and 16 at once. Prints median and p99 in milliseconds and the added cost of
the hop (median forwarded minus median local).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from backend.protocol import contract, methods  # noqa: E402
from backend.protocol.peer import RpcPeer  # noqa: E402
from backend.protocol.types.base import NodeId  # noqa: E402
from backend.protocol.types.cluster import (  # noqa: E402
    InviteAnswer,
    InviteParams,
    JoinWindowParams,
)
from backend.protocol.types.engines import NodeScope  # noqa: E402
from bench.pairing import _connect, _start  # noqa: E402


def _p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


async def _time(peer: RpcPeer, params: NodeScope, calls: int, concurrency: int) -> list[float]:
    samples: list[float] = []

    async def one() -> None:
        started = time.perf_counter()
        await contract.call(peer, methods.ENGINE_LIST, params, timeout=30)
        samples.append((time.perf_counter() - started) * 1000)

    for _ in range(calls // concurrency):
        await asyncio.gather(*(one() for _ in range(concurrency)))
    return samples


async def _main(calls: int) -> None:
    with tempfile.TemporaryDirectory(prefix="pair-bench-member-") as scratch:
        root = Path(scratch)
        processes = [_start(root / "a"), _start(root / "b")]
        try:
            async with _connect(root / "a") as a, _connect(root / "b") as b:
                await asyncio.sleep(1.0)
                b_status = await contract.call(b, methods.STATUS)
                invite = InviteParams(address="127.0.0.1", port=b_status.ports.node)
                await contract.call(b, methods.CLUSTER_OPEN_JOIN_WINDOW, JoinWindowParams())
                created = await contract.call(a, methods.CLUSTER_INVITE, invite)
                answer = InviteAnswer(id=created.invite.id, pin=created.pin)
                await contract.call(b, methods.CLUSTER_ACCEPT, answer, timeout=30)
                b_id = NodeId(b_status.node_id)
                for _ in range(200):
                    snapshot = await contract.call(a, methods.ENGINE_SUBSCRIBE)
                    if any(m.node_id == b_id and m.reachable for m in snapshot.members):
                        break
                    await asyncio.sleep(0.1)
                await _time(a, NodeScope(node=b_id), 32, 1)  # warm up
                for concurrency in (1, 16):
                    local = await _time(a, NodeScope(), calls, concurrency)
                    remote = await _time(a, NodeScope(node=b_id), calls, concurrency)
                    here, there = statistics.median(local), statistics.median(remote)
                    print(
                        f"c={concurrency:<3} engine:list local median {here:6.2f} ms, p99 "
                        f"{_p99(local):6.2f} ms | on B over the link median {there:6.2f} ms, "
                        f"p99 {_p99(remote):6.2f} ms | hop +{there - here:.2f} ms"
                    )
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                process.wait(15)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=320)
    args = parser.parse_args()
    asyncio.run(_main(args.calls))
    return 0


if __name__ == "__main__":
    sys.exit(main())
