"""How the Engines page's rows are built: from the engines and discovery stores, the shared
``PendingActions``, and what only the page knows (this node's identity and doors, the notices,
port errors and versions shown on cards)."""

from __future__ import annotations

from app.models.engines import (
    EngineKey,
    EngineRow,
    Host,
    RowExtras,
    engine_order,
    install_step,
    managed_row,
    member_doors,
    remote_rows,
)
from app.pending import PendingActions, PendingKey
from app.stores.discovery import DiscoveryStore, is_self
from app.stores.engines import EnginesStore
from backend.protocol.types.base import NodeId
from backend.protocol.types.engines import EngineStatus, EngineVersions, InstallProgress


class RowSources:
    """What rows are built from: the stores, and the facts only the page keeps (this node's
    id, name and doors as ``status`` said, and per engine its notice, port error and
    versions). Owns no tasks."""

    def __init__(
        self, engines: EnginesStore, discovery: DiscoveryStore, pending: PendingActions
    ) -> None:
        self.engines = engines
        self.discovery = discovery
        self.pending = pending
        self.node_id = NodeId("")
        self.node_name = "This computer"
        self.doors: dict[str, int] = {}
        self.notices: dict[EngineKey, str] = {}
        self.port_errors: dict[EngineKey, str] = {}
        self.versions: dict[EngineKey, EngineVersions] = {}

    def forget(self) -> None:
        """The session ended: this node is unknown again and no card says anything."""
        self.node_id, self.doors = NodeId(""), {}
        self.notices, self.port_errors, self.versions = {}, {}, {}

    def forget_node(self, node: NodeId) -> None:
        """``node`` left the cluster: drop what its cards said."""
        for kept in (self.notices, self.port_errors, self.versions):
            for key in [key for key in kept if key[0] == node]:
                del kept[key]

    def status(self, key: EngineKey) -> EngineStatus | None:
        """The last known status of an engine of this node or of a member."""
        node, engine = key
        if node == self.node_id:
            return self.engines.status(engine)
        member = self.engines.members.get(node)
        if member is None:
            return None
        return next((status for status in member.engines if status.engine == engine), None)

    def host(self, node: NodeId) -> Host:
        """The computer a row's engine runs on."""
        if node == self.node_id:
            return Host(node, self.node_name, local=True, doors=self.doors)
        member = self.engines.members.get(node)
        doors, address = member_doors(self.discovery.node(node))
        name, reachable = (member.name, member.reachable) if member else (node[:8], False)
        return Host(node, name, local=False, reachable=reachable, doors=doors, address=address)

    def install_of(self, key: EngineKey) -> InstallProgress | None:
        """The install or update of the engine still running, if one is."""
        node, engine = key
        if node == self.node_id:
            return self.engines.installs.get(engine)
        member = self.engines.members.get(node)
        installs = member.installs if member is not None else []
        return next((i for i in installs if i.engine == engine and not i.done), None)

    def row(self, key: EngineKey, status: EngineStatus, host: Host) -> EngineRow:
        """One managed engine's row."""
        install = self.install_of(key)
        extras = RowExtras(
            pending=self.pending.action(PendingKey(*key)),
            notice=self.notices.get(key),
            port_error=self.port_errors.get(key),
            install=install_step(install) if install is not None else None,
            versions=self.versions.get(key),
            scheduler=self.engines.scheduler(key[1]) if host.local else None,
        )
        return managed_row(host, status, extras)


def rows_of(sources: RowSources, node: NodeId) -> list[EngineRow]:
    """Every row of ``node``: this node's or a member's engines, or what another computer
    reports (read-only); none for a computer no store knows."""
    if node == sources.node_id:
        statuses = sorted(sources.engines.statuses.values(), key=engine_order)
    elif (member := sources.engines.members.get(node)) is not None:
        statuses = sorted(member.engines, key=engine_order)
    else:
        found = sources.discovery.node(node)
        return remote_rows(found) if found is not None and not is_self(found) else []
    host = sources.host(node)
    return [sources.row((node, status.engine), status, host) for status in statuses]
