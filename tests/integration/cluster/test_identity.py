"""A node's key pair and certificate with a real broker: shown by status and node-info, kept in
private files, stable across restarts, and a missing key stops the broker loudly."""

from __future__ import annotations

import stat
from collections.abc import Callable
from pathlib import Path

import httpx

from backend.protocol import methods
from tests.integration.conftest import Broker

StartBroker = Callable[..., Broker]


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_the_fingerprint_is_shown_kept_private_and_stable(
    start_broker: StartBroker, tmp_path: Path
) -> None:
    data_dir = tmp_path / "node"
    broker = start_broker(data_dir=data_dir)
    async with broker.connect() as client:
        status = await client.typed(methods.STATUS)
    assert status.fingerprint is not None and status.fingerprint.startswith("sha256:")
    assert len(status.fingerprint) == len("sha256:") + 64
    async with httpx.AsyncClient(verify=False, timeout=5) as http:
        info = (await http.get(f"https://127.0.0.1:{status.ports.node}/v1/node-info")).json()
    assert info["fingerprint"] == status.fingerprint
    identity = data_dir / "identity"
    assert _mode(identity) == 0o700
    assert _mode(identity / "node.key") == 0o600 and _mode(identity / "node.crt") == 0o600
    broker.stop()
    again = start_broker(data_dir=data_dir)
    async with again.connect() as client:
        assert (await client.typed(methods.STATUS)).fingerprint == status.fingerprint


async def test_a_missing_key_stops_the_broker_with_what_to_do(
    start_broker: StartBroker, tmp_path: Path
) -> None:
    data_dir = tmp_path / "node"
    start_broker(data_dir=data_dir).stop()
    key = data_dir / "identity" / "node.key"
    key.unlink()
    broker = start_broker(data_dir=data_dir, wait=False)
    assert broker.process.wait(30) == 1
    said = broker.stderr_path.read_text()
    assert "node.key" in said and "backup" in said, said[-2000:]
    assert not key.exists(), "nothing was re-minted"
