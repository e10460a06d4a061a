"""How long pairing takes once the PIN is typed: two real brokers on this computer.

    .venv/bin/python bench/pairing.py [--rounds 10]

Each round starts two fresh brokers (temporary data dirs, free ports, keys in files), has A
invite B, and times ``cluster:accept`` on B from the call to the answer ``paired`` (the whole
exchange: TLS handshakes, CPace, the sealed boxes, both durable commits, the mutual-TLS hello).
Prints the median and the worst round in milliseconds; the target is at most 2 s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from backend.protocol import contract, methods  # noqa: E402
from backend.protocol.endpoint import control_address, open_control_connection  # noqa: E402
from backend.protocol.peer import RpcPeer  # noqa: E402
from backend.protocol.types.cluster import (  # noqa: E402
    InviteAnswer,
    InviteParams,
    JoinWindowParams,
)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _start(data_dir: Path) -> subprocess.Popen[bytes]:
    flags = [f"--{name}-port" for name in ("node", "ollama", "openai", "llamacpp", "relay")]
    argv = [sys.executable, "-m", "backend", "node", "--data-dir", str(data_dir)]
    for flag in flags:
        argv += [flag, str(_free_port())]
    env = dict(os.environ, PAIR_KEYRING="off", PAIR_DISCOVERY_MDNS="0")
    return subprocess.Popen(
        argv,
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@contextlib.asynccontextmanager
async def _connect(data_dir: Path) -> AsyncIterator[RpcPeer]:
    for _ in range(200):
        try:
            reader, writer = await open_control_connection(control_address(data_dir))
            break
        except OSError:
            await asyncio.sleep(0.05)
    else:
        raise RuntimeError(f"no broker answers for {data_dir}")
    peer = RpcPeer(reader, writer, name="bench")
    runner = asyncio.create_task(peer.run())
    try:
        await contract.call(peer, methods.PING)
        yield peer
    finally:
        peer.close()
        await runner


async def _round(root: Path) -> float:
    processes = [_start(root / "a"), _start(root / "b")]
    try:
        async with _connect(root / "a") as a, _connect(root / "b") as b:
            await asyncio.sleep(1.0)  # let both node APIs start serving
            port = (await contract.call(b, methods.STATUS)).ports.node
            invite = InviteParams(address="127.0.0.1", port=port)
            await contract.call(b, methods.CLUSTER_OPEN_JOIN_WINDOW, JoinWindowParams())
            created = await contract.call(a, methods.CLUSTER_INVITE, invite)
            started = time.perf_counter()
            answer = InviteAnswer(id=created.invite.id, pin=created.pin)
            ended = await contract.call(b, methods.CLUSTER_ACCEPT, answer, timeout=30)
            took = time.perf_counter() - started
            if ended.state != "paired":
                raise RuntimeError(f"pairing ended as {ended.state}: {ended.reason}")
            return took * 1000
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(15)


async def _main(rounds: int) -> None:
    samples = []
    for index in range(rounds):
        with tempfile.TemporaryDirectory(prefix="pair-bench-pairing-") as scratch:
            samples.append(await _round(Path(scratch)))
        print(f"round {index + 1}: {samples[-1]:.1f} ms")
    print(
        f"pairing after the PIN: median {statistics.median(samples):.1f} ms, "
        f"worst {max(samples):.1f} ms over {rounds} rounds (target: at most 2000 ms)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    asyncio.run(_main(args.rounds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
