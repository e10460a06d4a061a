"""Advertising this node and browsing for peers over mDNS with python-zeroconf's asyncio API.

The asyncio API runs on the broker's loop (the sync API would start a thread). Records of
peers are handed to ``on_announced`` already parsed; malformed ones are logged and dropped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence

from zeroconf import IPVersion, ServiceStateChange, Zeroconf
from zeroconf.asyncio import AsyncServiceBrowser, AsyncServiceInfo, AsyncZeroconf

from backend.common.tasks import TaskSet
from backend.components.discovery.records import (
    SERVICE_TYPE,
    Announcement,
    MalformedRecord,
    instance_name_label,
    interface_addresses,
    parse_properties,
    rank_addresses,
    service_properties,
)
from backend.protocol.types.broker import Ports

log = logging.getLogger(__name__)

RESOLVE_TIMEOUT_MS = 3000
CLOSE_TIMEOUT_S = 2.0


def instance_name(display_name: str, node_id: str) -> str:
    """The full service instance name of this node."""
    return f"{instance_name_label(display_name, node_id)}.{SERVICE_TYPE}"


class MdnsLink:
    """Owns one ``AsyncZeroconf``: this node's registration and a browser for peers."""

    def __init__(
        self,
        *,
        node_id: str,
        ports: Ports,
        name: Callable[[], str],
        on_announced: Callable[[Announcement, tuple[str, ...]], None],
        addresses: Callable[[], Mapping[str, Sequence[str]]] = interface_addresses,
    ) -> None:
        self._node_id = node_id
        self._ports = ports
        self._name = name
        self._on_announced = on_announced
        self._interface_addresses = addresses
        self._zeroconf: AsyncZeroconf | None = None
        self._browser: AsyncServiceBrowser | None = None
        self._info: AsyncServiceInfo | None = None
        self._tasks = TaskSet("mdns")
        self._registered = False
        self.addresses: list[str] = []

    async def start(self) -> None:
        """Open the sockets, start browsing, and register this node (announcing it)."""
        self.addresses = rank_addresses(self._interface_addresses())
        self._zeroconf = AsyncZeroconf(ip_version=IPVersion.V4Only)
        self._browser = AsyncServiceBrowser(
            self._zeroconf.zeroconf, SERVICE_TYPE, handlers=[self._on_service_state_change]
        )
        self._info = self._service_info()
        await (await self._zeroconf.async_register_service(self._info, allow_name_change=True))
        self._registered = True
        log.info("mDNS: advertising %s with addresses %s", self._info.name, self.addresses)

    async def refresh_addresses(self) -> bool:
        """Re-announce when the interface addresses changed; returns whether they did."""
        addresses = rank_addresses(self._interface_addresses())
        if addresses == self.addresses or self._zeroconf is None or not self._registered:
            return False
        log.info("mDNS: addresses changed from %s to %s", self.addresses, addresses)
        self.addresses = addresses
        await self._zeroconf.async_update_interfaces()
        self._info = self._service_info()
        await (await self._zeroconf.async_update_service(self._info))
        return True

    async def close(self) -> None:
        """Say goodbye (unregister) and close the sockets; bounded and idempotent."""
        zeroconf, self._zeroconf = self._zeroconf, None
        await self._tasks.close(timeout=1.0)
        if zeroconf is None:
            return
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT_S):
                if self._browser is not None:
                    await self._browser.async_cancel()
                await zeroconf.async_close()  # unregisters: goodbye records with TTL 0
        except TimeoutError:
            log.warning("mDNS: closing took over %.1f s", CLOSE_TIMEOUT_S)
        self._browser = None

    def _service_info(self) -> AsyncServiceInfo:
        return AsyncServiceInfo(
            SERVICE_TYPE,
            instance_name(self._name(), self._node_id),
            port=self._ports.node,
            properties=service_properties(self._node_id, self._ports, self.addresses),
            server=f"pair-{self._node_id.replace('-', '')}.local.",
            parsed_addresses=self.addresses,
        )

    def _on_service_state_change(
        self,
        zeroconf: Zeroconf,
        service_type: str,
        name: str,
        state_change: ServiceStateChange,
    ) -> None:
        if state_change is ServiceStateChange.Removed:
            log.debug("mDNS: %s withdrawn", name)
            return
        self._tasks.spawn(self._resolve(service_type, name), name=f"resolve {name}")

    async def _resolve(self, service_type: str, name: str) -> None:
        if self._zeroconf is None:
            return
        info = AsyncServiceInfo(service_type, name)
        if not await info.async_request(self._zeroconf.zeroconf, RESOLVE_TIMEOUT_MS):
            log.debug("mDNS: %s did not resolve", name)
            return
        try:
            announcement = parse_properties(info.properties)
        except MalformedRecord as exc:
            log.warning("mDNS: ignoring %s: %s", name, exc)
            return
        if announcement.node_id == self._node_id:
            return  # self is read over loopback, never from the browser
        resolved = tuple(info.parsed_addresses(IPVersion.V4Only))
        self._on_announced(announcement, resolved)
