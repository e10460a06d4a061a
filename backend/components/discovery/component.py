"""The discovery component: the directory of nodes, its loops, and the numbered event stream."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Collection, Sequence

import aiohttp
import msgspec

from backend.common.certificates import NodeCredentials
from backend.common.hostport import url_host
from backend.common.tasks import TaskSet, wait_first
from backend.components.cluster.members import Member
from backend.components.discovery import manual, probe
from backend.components.discovery.mdns import MdnsLink
from backend.components.discovery.mdns_switch import MdnsSwitch
from backend.components.discovery.member_tls import MemberContexts, ask_node_info
from backend.components.discovery.records import Announcement
from backend.components.discovery.state import (
    Announced,
    Change,
    Directory,
    EngineFound,
    Event,
    FetchFailed,
    InfoFetched,
    NodeJoined,
    NodeLeft,
    NodeTelemetryChanged,
    NodeUpdated,
    Scanned,
    SourceDropped,
    apply,
    dial_order,
    due_for_probe,
)
from backend.components.discovery.timing import DiscoveryTiming, telemetry_delay
from backend.components.errors.registry import ErrorsRegistry
from backend.core.clock import Clock
from backend.core.component import Component
from backend.core.rpc import NumberedStream
from backend.protocol import errors
from backend.protocol.types import nodes as wire
from backend.protocol.types.base import NodeId
from backend.protocol.types.broker import Ports
from backend.protocol.types.nodes import DiscoveredNode, DiscoveryEvent, ManualNode, ManualNodeAdd

log = logging.getLogger(__name__)

MAX_CONCURRENT_FETCHES = 16
# The shortest wait of the telemetry loop: a poll that could not start (no session yet) is
# looked at again this soon, not in a busy loop.
POLL_GRANULARITY_S = 0.05
LOOPBACK = "127.0.0.1"


class _Poll(msgspec.Struct):
    due: float
    failures: int = 0


class DiscoveryComponent(Component):
    """Owns the mDNS link (advertiser and browser), an HTTP session for node-info and engine
    probes, the manual-node table, and the tasks that scan, poll telemetry and probe.

    ``members`` are the cluster's trusted members, read live: each is polled over mutual TLS
    with ``credentials`` (this node's certificate), the only way its inventories come.
    ``removed`` (read live) are the node ids removed from the cluster: their manual entries go,
    here as on every member, since every member learns of a removal.
    ``announce`` (the settings, read again at each ``settings_changed``) turns mDNS on and off
    live; ``use_mdns`` false keeps it off whatever they say.
    """

    def __init__(
        self,
        *,
        node_id: NodeId,
        ports: Ports,
        name: Callable[[], str],
        clock: Clock,
        events: NumberedStream[DiscoveryEvent],
        errors_sink: ErrorsRegistry,
        manual_store: manual.ManualNodeStore,
        timing: DiscoveryTiming | None = None,
        use_mdns: bool = True,
        announce: Callable[[], bool] = lambda: True,
        members: Callable[[], Sequence[Member]] = list,
        removed: Callable[[], Collection[str]] = frozenset,
        credentials: NodeCredentials | None = None,
    ) -> None:
        super().__init__("discovery")
        self._member_tls = MemberContexts(credentials, members)
        self._removed = removed
        # Where each member was last reached: its manual entry goes with it when it is removed.
        self._member_addresses: dict[str, tuple[str, int]] = {}
        self._node_id = node_id
        self._ports = ports
        self._name = name
        self._clock = clock
        self._events = events
        self._errors = errors_sink
        self._manual_store = manual_store
        self._timing = timing or DiscoveryTiming()
        self._use_mdns = use_mdns
        self._directory = Directory()
        self._manual: dict[str, ManualNode] = {}
        self._manual_loaded = False
        self._polls: dict[NodeId, _Poll] = {}
        self._in_flight: set[str] = set()  # node ids and "manual <id>" keys
        self._polls_changed = asyncio.Event()  # a poll was added or came back: look again
        self._settings_changed = asyncio.Event()
        self._tasks = TaskSet("discovery")
        self._session: aiohttp.ClientSession | None = None
        self._mdns_switch = MdnsSwitch(
            make_link=self._make_mdns_link,
            wanted=lambda: use_mdns and announce(),
            errors_sink=errors_sink,
        )
        self._limit = asyncio.Semaphore(MAX_CONCURRENT_FETCHES)
        self._stopped = asyncio.Event()
        self._describe_self: Callable[[], wire.NodeInfo] | None = None

    # Queries ---------------------------------------------------------------------------------

    def nodes(self) -> list[DiscoveredNode]:
        """Every node in the list, self first."""
        return self._directory.nodes()

    def manual_nodes(self) -> list[ManualNode]:
        """Every manual entry, oldest first."""
        return sorted(self._manual.values(), key=lambda node: node.added_at)

    def bind_self(self, describe: Callable[[], wire.NodeInfo]) -> None:
        """Read this node's own info from ``describe`` (what its node API answers this
        computer) instead of asking the node API over loopback: a TLS handshake on both ends
        every telemetry interval was about half of an idle broker's CPU (bench/README.md,
        "Suite time")."""
        self._describe_self = describe

    # Commands --------------------------------------------------------------------------------

    async def add_manual(self, params: ManualNodeAdd) -> ManualNode:
        """Add (or return the existing) manual entry and probe it now."""
        params = manual.validate(params)
        await self._load_manual()
        entry_id = manual.manual_id(params.address, params.port)
        existing = self._manual.get(entry_id)
        if existing is not None:
            return existing
        node = ManualNode(
            id=entry_id,
            address=params.address,
            port=params.port,
            name=params.name,
            added_at=self._clock.wall(),
            state="probing",
        )
        await self._manual_store.insert(node)
        self._manual[entry_id] = node
        log.info("manual node %s added", entry_id)
        if self._session is not None:
            self._spawn_manual_probe(entry_id)
        return node

    async def follow_members(self, members: Sequence[Member]) -> None:
        """Members of this node's cluster that discovery does not know yet are added by their
        address and node API port, so a member learned through the roster (never seen over
        mDNS, perhaps behind a VPN) is polled, listed and routable like the others."""
        await self._load_manual()
        known = {node.node_id for node in self._directory.nodes()}
        known |= {node.node_id for node in self._manual.values() if node.node_id is not None}
        for member in members:
            if member.node_id in known or not member.address:
                continue
            with contextlib.suppress(errors.RpcError):
                await self.add_manual(ManualNodeAdd(address=member.address, port=member.node_port))

    async def remove_manual(self, entry_id: str) -> None:
        """Forget a manual entry; ``NotFound`` for an unknown id."""
        await self._load_manual()
        node = self._manual.pop(entry_id, None)
        if node is None:
            raise errors.NotFound(f"no manual node with id {entry_id!r} (see `pair nodes`)")
        await self._manual_store.delete(entry_id)
        self._errors.clear_error(manual.error_id(entry_id))
        if node.node_id is not None:
            self._commit(SourceDropped(node.node_id, "manual"))
        log.info("manual node %s removed", entry_id)

    # Component -------------------------------------------------------------------------------

    async def run(self) -> None:
        """Advertise, browse, scan, poll and probe until stopped."""
        self._stopped.clear()
        await self._load_manual()
        connector = aiohttp.TCPConnector(limit=MAX_CONCURRENT_FETCHES, force_close=True)
        self._session = aiohttp.ClientSession(connector=connector)
        try:
            self._polls[self._node_id] = _Poll(due=0.0)
            self._polls_changed.set()
            async with asyncio.TaskGroup() as group:
                # Registration probes the name for ~1.5 s; the other loops need not wait for it.
                group.create_task(self._follow_mdns_setting(), name="discovery:mdns-switch")
                group.create_task(
                    self._every(self._timing.scan_interval, self._scan), name="discovery:scan"
                )
                group.create_task(self._telemetry_loop(), name="discovery:telemetry")
                group.create_task(
                    self._every(self._timing.manual_probe_interval, self._probe_all_manual),
                    name="discovery:manual",
                )
                if self._use_mdns:  # the link itself may be switched off: refresh checks
                    group.create_task(
                        self._every(self._timing.interface_interval, self._refresh_interfaces),
                        name="discovery:interfaces",
                    )
                await self._stopped.wait()
                raise _Stopped
        except* _Stopped:
            pass
        finally:
            await asyncio.shield(self._close())

    async def stop(self) -> None:
        """Say goodbye over mDNS and stop."""
        self._stopped.set()

    async def _close(self) -> None:
        await self._tasks.close(timeout=1.0)
        await self._mdns_switch.close()
        if self._session is not None:
            await self._session.close()
            self._session = None

    def settings_changed(self) -> None:
        """The settings changed: read ``announce`` again (a settings listener)."""
        self._settings_changed.set()

    async def _follow_mdns_setting(self) -> None:
        while True:
            self._settings_changed.clear()
            await self._mdns_switch.apply()
            await self._settings_changed.wait()

    def _make_mdns_link(self) -> MdnsLink:
        return MdnsLink(
            node_id=self._node_id, ports=self._ports, name=self._name, on_announced=self._announced
        )

    async def _every(self, interval: float, work: Callable[[], object]) -> None:
        while True:
            await self._clock.sleep(interval)
            result = work()
            if asyncio.iscoroutine(result):
                await result

    # The directory ---------------------------------------------------------------------------

    def _commit(self, event: Event) -> None:
        self._directory, changes = apply(self._directory, event, self._timing.policy)
        for change in changes:
            self._publish(change)

    def _publish(self, change: Change) -> None:
        if isinstance(change, NodeJoined) and change.node.kind == "pair":
            # Engine-only nodes have no node-info; their manual probe refreshes them.
            self._polls.setdefault(change.node.node_id, _Poll(due=self._due(0)))
            self._polls_changed.set()
            log.info(
                "node %s (%s) joined via %s",
                change.node.name,
                change.node.node_id,
                ",".join(change.node.sources),
            )
        if isinstance(change, NodeLeft):
            self._polls.pop(change.node_id, None)
            log.info("node %s left", change.node_id)
        self._events.publish(lambda seq: _wire(seq, change))

    def _scan(self) -> None:
        self._commit(Scanned())
        for node_id in due_for_probe(self._directory, self._timing.policy):
            self._spawn_fetch(node_id)
        members = self._member_tls.members()
        self._member_addresses.update(
            (member.node_id, (member.address, member.node_port))
            for member in members
            if member.address
        )
        self._forget_removed_members()
        known = {node.node_id for node in self._directory.nodes()}
        if (
            any(member.node_id not in known for member in members)
            and "members" not in self._in_flight
        ):
            self._in_flight.add("members")
            self._tasks.spawn(self._follow(members), name="follow members")

    def _forget_removed_members(self) -> None:
        removed = self._removed()
        gone = manual.entries_of_removed(self._manual.values(), removed, self._member_addresses)
        if gone and "removed members" not in self._in_flight:
            self._in_flight.add("removed members")
            self._tasks.spawn(self._forget(gone), name="forget removed members")

    async def _forget(self, entry_ids: Sequence[str]) -> None:
        try:
            for entry_id in entry_ids:
                with contextlib.suppress(errors.NotFound):  # `pair node remove` came first
                    await self.remove_manual(entry_id)
        finally:
            self._in_flight.discard("removed members")

    async def _follow(self, members: Sequence[Member]) -> None:
        try:
            await self.follow_members(members)
        finally:
            self._in_flight.discard("members")

    # mDNS ------------------------------------------------------------------------------------

    def _announced(self, announcement: Announcement, resolved: tuple[str, ...]) -> None:
        addresses = tuple(dict.fromkeys([*announcement.addresses, *resolved]))
        member = self._member_tls.is_member(announcement.node_id)
        at = self._clock.wall()
        self._commit(Announced(announcement.node_id, addresses, announcement.ports, at, member))
        port = announcement.ports["node"]
        self._spawn_fetch(announcement.node_id, addresses=addresses, port=port, source="mdns")

    async def _refresh_interfaces(self) -> None:
        link = self._mdns_switch.link
        if link is None:
            return
        try:
            await link.refresh_addresses()
        except (OSError, RuntimeError) as exc:
            log.warning("mDNS: re-announcing after an interface change failed: %s", exc)

    # Telemetry -------------------------------------------------------------------------------

    async def _telemetry_loop(self) -> None:
        """Fetch each polled node's info when it is due. Asleep until the next poll is due (a
        node polled every 2 s wakes the broker once per poll, not on a fixed tick), or until a
        poll is added or a fetch ends (``_polls_changed``)."""
        longest = self._timing.telemetry_interval
        while True:
            self._polls_changed.clear()
            now = self._clock.monotonic()
            for node_id, poll in list(self._polls.items()):
                if poll.due <= now and node_id not in self._in_flight:
                    self._spawn_fetch(node_id)
            waiting = [p.due for n, p in self._polls.items() if n not in self._in_flight]
            if not waiting:  # every poll under way: the first to end says so
                await self._polls_changed.wait()
                continue
            # Never a busy loop: a poll left due (no session yet) is looked at again shortly.
            delay = max(min(min(waiting) - now, longest), POLL_GRANULARITY_S)
            await wait_first(
                self._polls_changed.wait(),
                self._clock.sleep(delay),
                name="discovery:telemetry-wait",
            )

    def _spawn_fetch(
        self,
        node_id: NodeId,
        *,
        addresses: Sequence[str] | None = None,
        port: int | None = None,
        source: str | None = None,
    ) -> None:
        if node_id in self._in_flight or self._session is None:
            return
        self._in_flight.add(node_id)
        self._tasks.spawn(self._fetch(node_id, addresses, port, source), name=f"fetch {node_id}")

    async def _fetch(
        self, node_id: NodeId, addresses: Sequence[str] | None, port: int | None, source: str | None
    ) -> None:
        try:
            async with self._limit:
                answered = await self._fetch_once(node_id, addresses, port, source)
        finally:
            self._in_flight.discard(node_id)
        poll = self._polls.get(node_id)
        if poll is not None:
            poll.failures = 0 if answered else poll.failures + 1
            # Self may be polled before its node API listens; it is local, so no backoff.
            poll.due = self._due(0 if node_id == self._node_id else poll.failures)
            self._polls_changed.set()
        if not answered:
            self._commit(FetchFailed(node_id))

    async def _fetch_once(
        self, node_id: NodeId, addresses: Sequence[str] | None, port: int | None, source: str | None
    ) -> bool:
        assert self._session is not None
        is_self = node_id == self._node_id
        known = self._directory.entries.get(node_id)
        if is_self and self._describe_self is not None:
            self._commit(
                InfoFetched(
                    self._describe_self(),
                    LOOPBACK,
                    self._clock.wall(),
                    source="self",
                    addresses=self._self_addresses(),
                    authenticated=True,
                    member=False,
                )
            )
            return True
        if is_self:
            addresses, port = [LOOPBACK], self._ports.node
        elif addresses is None or port is None:
            if known is None or known.node.kind != "pair" or "node" not in known.node.ports:
                return False
            addresses, port = dial_order(self._directory, node_id), known.node.ports["node"]
        for address in addresses:
            try:
                answer = await ask_node_info(
                    self._session,
                    self._member_tls,
                    address,
                    port,
                    member=None if is_self else node_id,  # loopback: self tells all anyway
                    expected_id=node_id,
                    timeout=self._timing.fetch_timeout,
                )
            except probe.ProbeFailed as exc:
                log.debug("node %s not reached at %s: %s", node_id, address, exc)
                continue
            self._commit(
                InfoFetched(
                    answer.info,
                    address,
                    self._clock.wall(),
                    source="self" if is_self else ("mdns" if source == "mdns" else None),
                    addresses=self._self_addresses() if is_self else None,
                    authenticated=answer.mutual or is_self,  # self: read over loopback
                    member=not is_self and self._member_tls.is_member(node_id),
                )
            )
            return True
        if source == "mdns" and known is None:
            log.warning(
                "mDNS: node %s was announced but its node API does not answer as it", node_id
            )
        return False

    def _self_addresses(self) -> tuple[str, ...]:
        link = self._mdns_switch.link
        if link is not None and link.addresses:
            return tuple(link.addresses)
        return (LOOPBACK,)

    def _due(self, failures: int) -> float:
        return self._clock.monotonic() + telemetry_delay(self._timing, failures)

    # Manual nodes ----------------------------------------------------------------------------

    async def _load_manual(self) -> None:
        if self._manual_loaded:
            return
        self._manual_loaded = True
        for node in await self._manual_store.load():
            self._manual.setdefault(node.id, node)

    def _probe_all_manual(self) -> None:
        for entry_id in list(self._manual):
            self._spawn_manual_probe(entry_id)

    def _spawn_manual_probe(self, entry_id: str) -> None:
        key = f"manual {entry_id}"
        if key in self._in_flight or self._session is None:
            return
        self._in_flight.add(key)
        self._tasks.spawn(self._probe_manual(entry_id, key), name=key)

    async def _probe_manual(self, entry_id: str, key: str) -> None:
        try:
            node = self._manual.get(entry_id)
            if node is None:
                return
            async with self._limit:
                outcome = await self._classify_manual(node)
            self._record_manual(entry_id, outcome)
        finally:
            self._in_flight.discard(key)

    async def _classify_manual(self, node: ManualNode) -> manual.ProbeOutcome:
        assert self._session is not None
        timeout = self._timing.fetch_timeout
        at = self._clock.wall()
        try:
            # The node last seen here is asked as a member while it is one (and the address
            # still holds it); a node answering for the first time is asked anonymously.
            answer = await ask_node_info(
                self._session,
                self._member_tls,
                node.address,
                node.port,
                member=node.node_id,
                expected_id=None,
                timeout=timeout,
            )
        except probe.ProbeFailed as exc:
            pair_failure = str(exc)
        else:
            node_id = answer.info.node_id
            if node.id in self._manual:
                self._rekey_manual(node, node_id)
                self._commit(
                    InfoFetched(
                        answer.info,
                        node.address,
                        at,
                        source="manual",
                        manual_id=node.id,
                        authenticated=answer.mutual,
                        member=self._member_tls.is_member(node_id),
                    )
                )
            return manual.PairAnswered(node_id)
        try:
            found = await probe.probe_engine(
                self._session, node.address, node.port, timeout=timeout
            )
        except probe.ProbeFailed:
            return manual.NoAnswer(pair_failure)
        if node.id in self._manual:
            self._rekey_manual(node, NodeId(node.id))  # an engine-only node is keyed by it
            name = node.name or f"{found.engine} on {node.address}"
            self._commit(
                EngineFound(node.id, name, node.address, node.port, found.engine, found.models, at)
            )
        return manual.EngineAnswered(found.engine)

    def _rekey_manual(self, node: ManualNode, node_id: NodeId) -> None:
        # The machine at this address changed (wiped, or PAIR replaced a bare engine).
        if node.node_id is not None and node.node_id != node_id:
            self._commit(SourceDropped(node.node_id, "manual"))

    def _record_manual(self, entry_id: str, outcome: manual.ProbeOutcome) -> None:
        before = self._manual.get(entry_id)
        if before is None:
            return  # removed while the probe ran
        after = manual.after_probe(before, outcome, self._clock.wall())
        self._manual[entry_id] = after
        if isinstance(outcome, manual.NoAnswer) and after.node_id is not None:
            self._commit(FetchFailed(after.node_id))
        transition = manual.error_transition(before, after)
        if transition is True:
            self._errors.raise_error(
                manual.error_id(entry_id),
                f"The manual node {url_host(before.address)}:{before.port} has not answered "
                f"{after.failures} probes in a row ({after.last_error}).",
                severity="warning",
            )
        elif transition is False:
            self._errors.clear_error(manual.error_id(entry_id))


class _Stopped(Exception):
    """Leaves the task group when ``stop()`` was called."""


def _wire(seq: int, change: Change) -> DiscoveryEvent:
    match change:
        case NodeJoined(node=node):
            return wire.NodeJoined(seq=seq, node_id=node.node_id, node=node)
        case NodeUpdated(node=node):
            return wire.NodeUpdated(seq=seq, node_id=node.node_id, node=node)
        case NodeLeft(node_id=node_id):
            return wire.NodeLeft(seq=seq, node_id=node_id)
        case NodeTelemetryChanged():
            return wire.NodeTelemetryChanged(
                seq=seq,
                node_id=change.node_id,
                telemetry=change.telemetry,
                last_seen=change.last_seen,
            )
