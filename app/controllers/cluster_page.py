"""The Cluster page's controller: keeps ``MembersModel`` equal to the cluster, engines and
discovery stores, and runs the page's commands: rename the cluster, remove a member, leave,
the LAN API keys (``apikeys:*``) and the ``lan_access`` setting (through the settings
store)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from PySide6.QtCore import QObject, QTimer, Signal

from app.broker.connection import BrokerConnection
from app.controllers.base import Controller
from app.controllers.cluster_texts import (
    NO_ADDRESS,
    NewKey,
    client_settings,
    door_port,
    left_text,
    refusal,
)
from app.controllers.network_privacy import NetworkPrivacyController
from app.lan_addresses import interface_addresses, lan_addresses
from app.models.members import ApiKeysModel, MemberRow, MembersModel, member_row
from app.stores.cluster import ClusterStore
from app.stores.discovery import DiscoveryStore, is_self
from app.stores.engines import EnginesStore
from app.stores.settings import SettingsStore
from backend.protocol import methods
from backend.protocol.errors import InvalidParams, RpcError
from backend.protocol.types.apikeys import ApiKeyCreate, ApiKeyId, ApiKeyRef
from backend.protocol.types.base import NodeId
from backend.protocol.types.broker import BrokerStatus
from backend.protocol.types.cluster import (
    ClusterMember,
    ClusterRename,
    ClusterStatus,
    JoinWindow,
    JoinWindowParams,
    MemberRef,
)

# The page's texts live in cluster_texts; importers of this module keep finding them here.
__all__ = ["ClusterPageController", "NewKey", "client_settings"]

log = logging.getLogger(__name__)

LAN_ACCESS = "lan_access"
REFRESH_MS = 30_000  # "2 min ago" moves on by itself; nothing is asked of the broker for it


class ClusterPageController(Controller):
    """Shows the cluster store's members as row changes (a reset per snapshot), with each
    member's engines (engines store) and last-seen time (discovery store), and re-renders the
    times every ``refresh_ms``. Reads the LAN API keys and ``lan_access`` per session and runs
    the page's commands; outcomes are signals. Owns the command and read tasks and the
    refresh timer."""

    changed = Signal()  # the cluster, this node's identity or lan_access changed
    renamed = Signal(str)  # the name saved
    rename_failed = Signal(str)  # why, for the user
    membership_done = Signal(str)  # what a removal or a leave did, for the user
    membership_failed = Signal(str)
    key_created = Signal(object)  # NewKey
    key_revoked = Signal(str)  # the key's name
    keys_failed = Signal(str)
    lan_access_failed = Signal(str)
    join_failed = Signal(str)  # why the join window did not open or close, for the user

    def __init__(
        self,
        connection: BrokerConnection,
        members: MembersModel,
        keys: ApiKeysModel,
        cluster: ClusterStore,
        engines: EnginesStore,
        discovery: DiscoveryStore,
        settings: SettingsStore,
        parent: QObject | None = None,
        *,
        clock: Callable[[], float] = time.time,
        refresh_ms: int = REFRESH_MS,
        interfaces: Callable[[], list[str]] = interface_addresses,
    ) -> None:
        super().__init__(connection, parent)
        self.members = members
        self.keys = keys
        self.cluster = cluster
        self.engines = engines
        self.discovery = discovery
        self.settings = settings
        self.privacy = NetworkPrivacyController(connection, settings, self)
        self._clock = clock
        self._interfaces = interfaces
        self._renaming = False
        self._timer = QTimer(self)
        self._timer.setInterval(refresh_ms)
        self._timer.timeout.connect(self.refresh)
        self._timer.start()
        self._follow_stores()

    def _follow_stores(self) -> None:
        self.cluster.reset.connect(self._on_cluster_reset)
        self.cluster.cleared.connect(self._on_cluster_reset)
        self.cluster.status_changed.connect(self._on_cluster_status_changed)
        self.cluster.failed.connect(self._on_cluster_failed)
        self.engines.reset.connect(self.refresh)
        self.engines.member_changed.connect(self._on_member_fact_changed)
        self.discovery.reset.connect(self.refresh)
        self.discovery.node_changed.connect(self._on_member_fact_changed)
        self.discovery.telemetry_changed.connect(self._on_member_fact_changed)
        self.discovery.node_removed.connect(self._on_member_fact_changed)
        self.settings.changed.connect(self.changed)

    async def close(self) -> None:
        """Stop the refresh timer and cancel this controller's tasks (bounded)."""
        self._timer.stop()
        await self.privacy.close()
        await super().close()

    # What the page reads ---------------------------------------------------------------------

    @property
    def status(self) -> ClusterStatus | None:
        """This node's identity and cluster; None until the cluster store has a snapshot."""
        return self.cluster.status

    @property
    def in_cluster(self) -> bool:
        """Whether this node is in a cluster (with or without other members)."""
        return self.status is not None and self.status.cluster_id is not None

    @property
    def lan_access(self) -> bool | None:
        """The ``lan_access`` setting; None until read (or when the broker has no such key)."""
        if self.settings.spec(LAN_ACCESS) is None:
            return None
        return self.settings.value(LAN_ACCESS) is True

    @property
    def cluster_error(self) -> str | None:
        """Why the cluster could not be read, if it could not."""
        return self.cluster.error

    @property
    def renaming(self) -> bool:
        """Whether a rename is waiting for the broker's answer."""
        return self._renaming

    def member(self, node_id: NodeId) -> MemberRow | None:
        """One member's row, if shown."""
        return self.members.get(node_id)

    # Commands --------------------------------------------------------------------------------

    def rename(self, name: str) -> None:
        """Rename the cluster (``renamed`` or ``rename_failed``); the same name is a no-op."""
        status = self.status
        if self._renaming or status is None:
            return
        if name.strip() == status.cluster_name:
            self.renamed.emit(status.cluster_name)
            return
        self._renaming = True
        self._tasks.spawn(self._rename(name), name="rename")

    def remove_member(self, node_id: NodeId) -> None:
        """Remove a member for good (``membership_done`` or ``membership_failed``)."""
        row = self.members.get(node_id)
        name = row.name if row is not None else node_id[:8]
        self._tasks.spawn(self._remove(node_id, name), name=f"remove-{node_id[:8]}")

    def leave(self) -> None:
        """Leave the cluster (``membership_done`` or ``membership_failed``)."""
        self._tasks.spawn(self._leave(self.status), name="leave")

    def reload(self) -> None:
        """Read the cluster and the keys again (after a failure)."""
        self.cluster.resubscribe()
        self.reload_keys()

    def reload_keys(self) -> None:
        """Read the LAN API keys again (while connected)."""
        if self.connection.ownership is not None:
            self._tasks.spawn(self._read_keys(), name="keys")

    def create_key(self, name: str) -> None:
        """Create a LAN API key (``key_created`` with its secret, or ``keys_failed``)."""
        self._tasks.spawn(self._create_key(name), name="create-key")

    def revoke_key(self, key_id: ApiKeyId) -> None:
        """Revoke a LAN API key (``key_revoked`` or ``keys_failed``)."""
        self._tasks.spawn(self._revoke_key(key_id), name="revoke-key")

    def set_lan_access(self, on: bool) -> None:
        """Save ``lan_access`` (``changed``, or ``lan_access_failed`` then ``changed``)."""
        if self.lan_access is None or self.lan_access == on:
            return
        self._tasks.spawn(self._save_lan_access(on), name="lan-access")

    def refresh(self) -> None:
        """Build every member's row again (times move on); only changed rows are signalled."""
        self.members.sync(self._rows())

    # The calls -------------------------------------------------------------------------------

    async def _rename(self, name: str) -> None:
        try:
            status = await self.connection.call(methods.CLUSTER_RENAME, ClusterRename(name=name))
        except InvalidParams as exc:
            self.rename_failed.emit(refusal(exc))
        except RpcError as exc:
            log.info("cluster:rename failed: %s", exc)
            self.rename_failed.emit(f"Could not rename the cluster: {exc}")
        else:
            self.renamed.emit(status.cluster_name)
        finally:
            self._renaming = False

    async def _remove(self, node_id: NodeId, name: str) -> None:
        try:
            removed = await self.connection.call(methods.CLUSTER_REMOVE, MemberRef(node_id=node_id))
        except RpcError as exc:
            log.info("cluster:remove failed: %s", exc)
            self.membership_failed.emit(f"Could not remove {name}: {exc}")
            return
        self.membership_done.emit(
            f"{removed.name} was removed for good; it is being told to leave."
        )

    async def _leave(self, before: ClusterStatus | None) -> None:
        try:
            left = await self.connection.call(methods.CLUSTER_LEAVE)
        except RpcError as exc:
            log.info("cluster:leave failed: %s", exc)
            self.membership_failed.emit(f"Could not leave the cluster: {exc}")
            return
        self.membership_done.emit(left_text(left, before))

    async def _read_keys(self) -> None:
        try:
            keys = await self.connection.call(methods.APIKEYS_LIST)
        except RpcError as exc:
            log.info("apikeys:list failed: %s", exc)
            self.keys_failed.emit(f"Could not read the API keys: {exc}")
            return
        self.keys.sync(keys)

    async def _create_key(self, name: str) -> None:
        # What the dialog needs is asked first: once the key exists nothing may stand between
        # it and its secret being shown (it cannot be shown again).
        status = await self._read_status()
        try:
            created = await self.connection.call(methods.APIKEYS_CREATE, ApiKeyCreate(name=name))
        except InvalidParams as exc:
            self.keys_failed.emit(f"Not created: {exc.message.rstrip('.')}.")
            return
        except RpcError as exc:
            log.info("apikeys:create failed: %s", exc)
            self.keys_failed.emit(f"Could not create the key: {exc}")
            return
        self.keys.upsert(created.key)
        self.key_created.emit(
            NewKey(
                info=created.key,
                secret=created.secret,
                host=self._lan_host(),
                openai_port=door_port(status, "openai"),
                ollama_port=door_port(status, "ollama"),
                lan_access=self.lan_access is True and not self.privacy.public_network,
                llamacpp_port=door_port(status, "llamacpp"),
            )
        )

    async def _read_status(self) -> BrokerStatus | None:
        try:
            return await self.connection.call(methods.STATUS)
        except RpcError as exc:
            log.info("status failed: %s", exc)
            return None

    async def _revoke_key(self, key_id: ApiKeyId) -> None:
        try:
            key = await self.connection.call(methods.APIKEYS_REVOKE, ApiKeyRef(id=key_id))
        except RpcError as exc:
            log.info("apikeys:revoke failed: %s", exc)
            self.keys_failed.emit(f"Could not revoke the key: {exc}")
            return
        self.keys.remove(key.id)
        self.key_revoked.emit(key.name)

    async def _save_lan_access(self, on: bool) -> None:
        try:
            await self.settings.save({LAN_ACCESS: on})
        except RpcError as exc:
            log.info("settings:set lan_access failed: %s", exc)
            verb = "turn LAN access on" if on else "turn LAN access off"
            self.lan_access_failed.emit(f"Could not {verb}: {exc}")
            self.changed.emit()  # the switch shows the saved value again

    # Rows ------------------------------------------------------------------------------------

    def _rows(self) -> list[MemberRow]:
        return [self._row(member) for member in self.cluster.members()]

    def _row(self, member: ClusterMember) -> MemberRow:
        status = self.status
        names = {other.node_id: other.name for other in status.members} if status else {}
        return member_row(
            member,
            self.engines.members.get(member.node_id),
            self.discovery.node(member.node_id),
            self_id=status.node_id if status is not None else None,
            names=names,
            now=self._clock(),
        )

    def _lan_host(self) -> str:
        advertised = [
            address
            for node in self.discovery.nodes.values()
            if is_self(node)
            for address in node.addresses
        ]
        found = lan_addresses(advertised, self._interfaces())
        return found[0] if found else NO_ADDRESS

    # The join window: this computer takes invites only while its user asked to join -------

    @property
    def join_window(self) -> JoinWindow | None:
        """The join window while it is open (until the broker says it closed, or its time)."""
        status = self.status
        window = status.join_window if status is not None else None
        return window if window is not None and self._clock() < window.closes_at else None

    def now(self) -> float:
        """The time now on this controller's clock (Unix seconds)."""
        return self._clock()

    def join_address(self) -> str:
        """This computer's address, as the other computer types it in Add node…."""
        return self._lan_host()

    def open_join_window(self) -> None:
        """Accept invites for the next 10 minutes; the status push shows the window."""
        self._tasks.spawn(self._set_join_window(JoinWindowParams()), name="join-window")

    def close_join_window(self) -> None:
        """Stop accepting invites."""
        self._tasks.spawn(self._set_join_window(None), name="join-window")

    async def _set_join_window(self, params: JoinWindowParams | None) -> None:
        try:
            if params is None:
                await self.connection.call(methods.CLUSTER_CLOSE_JOIN_WINDOW)
            else:
                await self.connection.call(methods.CLUSTER_OPEN_JOIN_WINDOW, params)
        except RpcError as exc:
            log.info("join window: %s", exc)
            self.join_failed.emit(f"Could not change whether this computer takes invites: {exc}")

    # Store and connection slots --------------------------------------------------------------

    def _on_cluster_reset(self) -> None:
        self.members.reset(self._rows())
        self.changed.emit()

    def _on_cluster_status_changed(self) -> None:
        self.refresh()
        self.changed.emit()

    def _on_cluster_failed(self, _message: str) -> None:
        self.changed.emit()

    def _on_member_fact_changed(self, node_id: NodeId) -> None:
        member = self.cluster.member(node_id)
        if member is not None:
            self.members.upsert(self._row(member))

    def _on_connection_session_ready(self) -> None:
        self.reload_keys()

    def _on_connection_session_changed(self) -> None:
        if self.connection.ownership is None:
            self.keys.reset([])
            self.changed.emit()
