"""mDNS follows the ``local_discovery`` and ``public_network`` settings while discovery runs: off,
the link (announcement and browser) is closed with its goodbye; on again, a new one starts; no
restart either way. A link that cannot start is reported once, not retried every tick."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, ClassVar

import pytest

from backend.components.discovery import component as discovery_component
from backend.components.discovery.component import DiscoveryComponent
from backend.components.discovery.manual import ManualNodeStore
from backend.components.discovery.mdns_switch import UNAVAILABLE_ERROR
from backend.components.discovery.timing import DiscoveryTiming
from backend.components.errors.registry import ErrorsRegistry
from backend.core.clock import SystemClock
from backend.core.rpc import ClientHub, NumberedStream
from backend.core.store import Store
from backend.protocol import methods
from backend.protocol.types.base import NodeId
from backend.protocol.types.broker import Ports
from tests.support.ports import free_port
from tests.unit.cluster.harness import eventually
from tests.unit.components.discovery_rig import run_discovery

SELF = NodeId("55555555-5555-4555-8555-555555555555")
TIMING = DiscoveryTiming(scan_interval=0.1, telemetry_interval=0.1)


class FakeLink:
    """Stands in for the mDNS link: records starts and closes."""

    made: ClassVar[list[FakeLink]] = []
    fail_with: ClassVar[OSError | None] = None

    def __init__(self, **_: Any) -> None:
        self.started = False
        self.closed = False
        self.addresses: list[str] = []
        FakeLink.made.append(self)

    async def start(self) -> None:
        if FakeLink.fail_with is not None:
            raise FakeLink.fail_with
        self.started = True

    async def refresh_addresses(self) -> bool:
        return False

    async def close(self) -> None:
        self.closed = True

    @property
    def running(self) -> bool:
        return self.started and not self.closed


@asynccontextmanager
async def running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: Settings
) -> AsyncIterator[ErrorsRegistry]:
    """Discovery running with fake mDNS links, ``settings.announce`` as its setting."""
    FakeLink.made = []
    monkeypatch.setattr(discovery_component, "MdnsLink", FakeLink)
    store = Store(tmp_path / "discovery.db")
    await store.open()
    registry = ErrorsRegistry(node_id=SELF, clock=SystemClock(), on_update=lambda _: None)
    component = DiscoveryComponent(
        node_id=SELF,
        ports=Ports(node=free_port(), ollama=free_port(), openai=free_port(), llamacpp=1),
        name=lambda: "desk",
        clock=SystemClock(),
        events=NumberedStream(methods.DISCOVERY_EVENT, ClientHub()),
        errors_sink=registry,
        manual_store=ManualNodeStore(store),
        timing=TIMING,
        announce=lambda: settings.announce,
    )
    settings.listeners.append(component.settings_changed)
    try:
        async with run_discovery(component, store):
            yield registry
    finally:
        FakeLink.fail_with = None


class Settings:
    """The ``announce`` setting, telling its listeners when set (as the settings service)."""

    def __init__(self, announce: bool) -> None:
        self.announce = announce
        self.listeners: list[Callable[[], None]] = []

    def set(self, announce: bool) -> None:
        self.announce = announce
        for listener in self.listeners:
            listener()


def _running() -> list[FakeLink]:
    return [link for link in FakeLink.made if link.running]


async def _some_ticks() -> None:
    await asyncio.sleep(0.2)


async def test_turning_discovery_off_and_on_closes_and_restarts_mdns_live(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(announce=True)
    async with running(tmp_path, monkeypatch, settings):
        await eventually(lambda: len(_running()) == 1)
        settings.set(False)
        await eventually(lambda: _running() == [] and FakeLink.made[0].closed)
        settings.set(True)
        await eventually(lambda: len(_running()) == 1 and len(FakeLink.made) == 2)


async def test_with_discovery_off_from_the_start_mdns_never_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running(tmp_path, monkeypatch, Settings(announce=False)):
        await _some_ticks()
        assert FakeLink.made == []


async def test_a_link_that_cannot_start_is_reported_once_and_not_retried_every_tick(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    FakeLink.fail_with = OSError(98, "Address already in use")
    async with running(tmp_path, monkeypatch, Settings(announce=True)) as registry:
        await eventually(lambda: any(e.id == UNAVAILABLE_ERROR for e in registry.snapshot()))
        [said] = [e.message for e in registry.snapshot() if e.id == UNAVAILABLE_ERROR]
        assert said.startswith("mDNS could not start (address already in use);")  # no [Errno 98]
        await _some_ticks()
        assert len(FakeLink.made) == 1
