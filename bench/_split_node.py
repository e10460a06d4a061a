"""One side of the RPC tunnel in a process of its own, for ``bench/split.py``.

Not a benchmark itself. ``split.py`` pairs the nodes once in its own process (the cluster
unit tests' harness: real pairing, real mutual TLS) and saves each node's files and
credentials; this script starts one of them again from those files, in whatever network
namespace it was launched in, as a broker would:

- ``member``: the node that lends its devices. It serves ``RpcTunnels`` (the node API's
  ``/v1/cluster/rpc-tunnel``, members-only gate included) on ``--listen``, leading to the
  ``rpc-server`` that PAIR's ``RpcServerLender`` starts on this namespace's loopback when the
  first tunnel asks (the one beside ``--llama-server``), stopped when this process stops;
  ``--rpc-threads`` replaces the lender's thread count (a thread per core), because every
  node of the benchmark shares one computer's cores.
- ``host``: the node that runs ``llama-server``. It holds one ``TunnelListener`` per
  ``--member NODE_ID=ADDRESS:PORT`` (in that order), each on a loopback port of its own.

When ready it prints one JSON line (``{"ports": [...]}``: the member's tunnel port, or the
host's listener ports) and runs until SIGTERM, SIGINT or the end of its standard input.

    python bench/_split_node.py member --root DIR --name b --node-id ID --listen ADDR \
        --llama-server PATH --rpc-threads 1
    python bench/_split_node.py host --root DIR --name a --node-id ID --member ID=ADDR:PORT ...
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from cryptography import x509  # noqa: E402
from cryptography.hazmat.primitives import serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402

from backend.common.certificates import NodeCredentials, fingerprint_of  # noqa: E402
from backend.components.cluster.members import Member  # noqa: E402
from backend.components.engines.process import EngineLog, EngineProcess, Spawn  # noqa: E402
from backend.components.split.lender import RpcServerLender  # noqa: E402
from backend.components.split.tunnel_listener import MemberDialer, TunnelListener  # noqa: E402
from backend.components.split.tunnel_server import RpcTunnels  # noqa: E402
from backend.protocol.types.base import NodeId  # noqa: E402
from tests.fakes import FakeClock  # noqa: E402
from tests.unit.cluster.harness import Node, serve_routes, start_node, stop_node  # noqa: E402

CREDENTIALS_FILE = "credentials.pem"
CLOCK_START = 1_700_000_000.0


def save_credentials(folder: Path, credentials: NodeCredentials) -> None:
    """Write the node's certificate and private key (PEM, unencrypted: a throwaway identity)."""
    key = credentials.private_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    (folder / CREDENTIALS_FILE).write_bytes(credentials.cert_pem + key)


def load_credentials(folder: Path) -> NodeCredentials:
    """The credentials ``save_credentials`` wrote: the same certificate, so members' pins hold."""
    data = (folder / CREDENTIALS_FILE).read_bytes()
    certificate = x509.load_pem_x509_certificate(data)
    key = serialization.load_pem_private_key(data, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{folder / CREDENTIALS_FILE} holds no EC private key")
    cert_der = certificate.public_bytes(serialization.Encoding.DER)
    cert_pem = certificate.public_bytes(serialization.Encoding.PEM)
    return NodeCredentials(cert_der, cert_pem, key, fingerprint_of(cert_der))


async def _restarted(options: argparse.Namespace) -> Node:
    credentials = load_credentials(options.root / options.name)
    clock = FakeClock(start=CLOCK_START)
    return await start_node(
        options.root, options.name, clock, NodeId(options.node_id), credentials=credentials
    )


async def _serve_member(options: argparse.Namespace, stopped: asyncio.Event) -> None:
    node = await _restarted(options)
    try:
        llama_server: Path = options.llama_server
        lender = RpcServerLender(
            llama_server=lambda: llama_server,
            data_dir=options.root / options.name,
            spawn=_with_threads(options.rpc_threads),
        )
        tunnels = RpcTunnels(cluster=node.service, rpc_server=lender)
        runner, port = await serve_routes(node, tunnels.add_routes, host=options.listen)
        try:
            print(json.dumps({"ports": [port]}), flush=True)
            await stopped.wait()
        finally:
            await runner.cleanup()
            await lender.close()
    finally:
        await stop_node(node)


def _with_threads(threads: int) -> Spawn:
    """The lender's way of starting a process, with ``-t threads`` in place of its own."""

    async def spawn(argv: Sequence[str], env: dict[str, str], output: EngineLog) -> EngineProcess:
        changed = list(argv)
        changed[changed.index("-t") + 1] = str(threads)
        return await EngineProcess.spawn(changed, env, output)

    return spawn


def _member_addresses(specs: list[str]) -> dict[NodeId, tuple[str, int]]:
    """``ID=ADDRESS:PORT`` per member, in the order given."""
    addresses: dict[NodeId, tuple[str, int]] = {}
    for spec in specs:
        node_id, _, where = spec.partition("=")
        address, _, port = where.rpartition(":")
        if not node_id or not address or not port.isdigit():
            raise SystemExit(f"--member wants ID=ADDRESS:PORT, got {spec!r}")
        addresses[NodeId(node_id)] = (address, int(port))
    return addresses


async def _serve_host(options: argparse.Namespace, stopped: asyncio.Event) -> None:
    addresses = _member_addresses(options.member)
    node = await _restarted(options)

    def where(member: Member) -> list[tuple[str, int]]:
        return [addresses[member.node_id]]

    dialer = MemberDialer(node.credentials, where)
    listeners: list[TunnelListener] = []
    try:
        for node_id in addresses:
            listeners.append(TunnelListener(node.service.membership.members[node_id], dialer))
        ports = [await listener.start() for listener in listeners]
        print(json.dumps({"ports": ports}), flush=True)
        await stopped.wait()
    finally:
        for listener in listeners:
            await listener.close()
        await dialer.close()
        await stop_node(node)


async def _until_told_to_stop(stopped: asyncio.Event) -> None:
    """Set ``stopped`` on SIGTERM, SIGINT or the end of standard input (the parent is gone)."""
    loop = asyncio.get_running_loop()
    for number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(number, stopped.set)
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while await reader.read(4096):
        pass
    stopped.set()


async def _main(options: argparse.Namespace) -> None:
    stopped = asyncio.Event()
    serve = _serve_member if options.role == "member" else _serve_host
    async with asyncio.TaskGroup() as group:
        group.create_task(serve(options, stopped), name=f"split-bench:{options.role}")
        watch = group.create_task(_until_told_to_stop(stopped), name="split-bench:stdin")
        await stopped.wait()
        watch.cancel()


def main() -> int:
    """Run one side until told to stop."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("role", choices=("member", "host"))
    parser.add_argument("--root", type=Path, required=True, help="the paired nodes' folder")
    parser.add_argument("--name", required=True)
    parser.add_argument("--node-id", required=True)
    parser.add_argument("--listen", default="127.0.0.1", help="member: the tunnel's address")
    parser.add_argument("--llama-server", type=Path, help="member: rpc-server's neighbour")
    parser.add_argument("--rpc-threads", type=int, default=1, help="member: rpc-server's -t")
    parser.add_argument("--member", action="append", default=[], help="host: ID=ADDRESS:PORT")
    asyncio.run(_main(parser.parse_args()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
