"""The network settings applied to running brokers over real mDNS, in two namespaces: with
``local_discovery`` off, B neither announces itself nor listens, so A and B do not find each
other; turned on, they do, without a restart; with ``public_network`` on, B's node API refuses A
(a stranger), so A cannot reach it any more.

Needs root and ``ip netns`` (skipped otherwise), as the multicast tests it borrows from."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import Broker
from tests.integration.discovery.test_manual_nodes import by_id
from tests.integration.discovery.test_multicast_netns import (
    _wait_for,
    namespaces,
    start_in_namespace,
)

__all__ = ["namespaces", "start_in_namespace"]  # fixtures, used by name
pytestmark = pytest.mark.linux_only("network namespaces made with `ip netns`, as root")
QUIET_S = 8.0


async def test_discovery_follows_the_settings_without_a_restart(
    namespaces: list[tuple[str, str]],
    start_in_namespace: Callable[[str, Path], Broker],
    tmp_path: Path,
) -> None:
    (ns_a, _), (ns_b, _) = namespaces
    second = start_in_namespace(ns_b, tmp_path / "b")
    async with second.connect() as other:
        await other.call("settings:set", {"values": {"local_discovery": False}})
        # The setting is checked once a second: wait until B says mDNS is off (a loaded
        # machine may take longer than that second).
        async with asyncio.timeout(30):
            while not any("mDNS: off" in str(line.get("msg", "")) for line in second.logs()):
                await asyncio.sleep(0.1)
        first = start_in_namespace(ns_a, tmp_path / "a")
        async with first.connect() as client:
            first_id = (await client.call("status"))["node_id"]
            second_id = (await other.call("status"))["node_id"]

            def reachable(nodes: list[dict[str, Any]]) -> bool:
                node = by_id(nodes, second_id)
                return node is not None and node["reachable"] is True

            # Both would find each other within a second or two with mDNS on (see above).
            await asyncio.sleep(QUIET_S)
            assert by_id(await client.call("discovery:get-nodes"), second_id) is None
            assert by_id(await other.call("discovery:get-nodes"), first_id) is None

            await other.call("settings:set", {"values": {"local_discovery": True}})
            await _wait_for(client, reachable, 20)
            await _wait_for(other, lambda n: by_id(n, first_id) is not None, 20)

            await other.call("settings:set", {"values": {"public_network": True}})
            # A is no member of B's: its node-info questions are refused from now on.
            await _wait_for(client, lambda n: not reachable(n), 10)
