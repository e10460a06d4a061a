"""How discovery asks a node for its node-info: over mutual TLS when it is a trusted member of
this node's cluster (the only way its model inventories are sent), anonymously otherwise."""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable, Sequence

import aiohttp

from backend.common import tls
from backend.common.certificates import NodeCredentials
from backend.components.cluster.members import Member
from backend.components.discovery import probe
from backend.protocol.types.base import NodeId
from backend.protocol.types.nodes import NodeInfo

log = logging.getLogger(__name__)


class MemberContexts:
    """The client contexts for members: our certificate, and only that member's accepted.

    One per pinned certificate, built on first use (about 2 ms: the key goes through a file)
    and dropped once the certificate is no longer pinned. Membership is read on every lookup,
    so a member removed is asked anonymously from its next poll on. Owns no tasks or sockets.
    """

    def __init__(
        self, credentials: NodeCredentials | None, members: Callable[[], Sequence[Member]]
    ) -> None:
        self._credentials = credentials
        self._members = members
        self._contexts: dict[bytes, ssl.SSLContext] = {}

    def members(self) -> list[Member]:
        """The trusted members as of now."""
        return list(self._members())

    def context_for(self, node_id: NodeId | None) -> ssl.SSLContext | None:
        """The mutual TLS context for ``node_id`` while it is a trusted member, else ``None``."""
        members = self.members()
        pinned = {member.cert_der for member in members}
        for der in [der for der in self._contexts if der not in pinned]:
            del self._contexts[der]
        member = next((m for m in members if m.node_id == node_id), None)
        if member is None or self._credentials is None:
            return None
        context = self._contexts.get(member.cert_der)
        if context is None:
            context = tls.client_context(self._credentials, member.cert_der)
            self._contexts[member.cert_der] = context
        return context


async def ask_node_info(
    session: aiohttp.ClientSession,
    contexts: MemberContexts,
    address: str,
    port: int,
    *,
    member: NodeId | None,
    expected_id: NodeId | None,
    timeout: float,
) -> NodeInfo:
    """The node-info at ``address:port``: over mutual TLS while ``member`` is a trusted member,
    else anonymously (raises ``probe.ProbeFailed``).

    A member that answers but refuses the mutual handshake (it removed us, or someone else holds
    the address now) is asked again anonymously, so it stays reachable, without inventories,
    until the membership catches up; one that does not answer at all is not asked twice.
    """
    mutual = contexts.context_for(member)
    if mutual is not None:
        try:
            return await probe.fetch_node_info(
                session, address, port, expected_id=member, timeout=timeout, tls_context=mutual
            )
        except probe.NotReached:
            raise
        except probe.ProbeFailed as exc:
            log.debug(
                "member %s refused mutual TLS at %s (%s); asking anonymously", member, address, exc
            )
    return await probe.fetch_node_info(
        session, address, port, expected_id=expected_id, timeout=timeout
    )
