"""How discovery asks a node for its node-info: over mutual TLS when it is a trusted member of
this node's cluster (the only way its model inventories are sent), anonymously otherwise.

A member's word counts only over its pinned handshake: an anonymous answer that names a member
(a spoofed mDNS record, an impostor at a member's address) is never taken for the member."""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable, Sequence

import aiohttp
import msgspec

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

    def is_member(self, node_id: NodeId) -> bool:
        """Whether ``node_id`` is a trusted member now (its answers count only over mutual TLS)."""
        return any(member.node_id == node_id for member in self._members())

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


class NodeAnswer(msgspec.Struct, frozen=True):
    """A node-info answer, and whether it came over the member's pinned mutual TLS."""

    info: NodeInfo
    mutual: bool


async def ask_node_info(
    session: aiohttp.ClientSession,
    contexts: MemberContexts,
    address: str,
    port: int,
    *,
    member: NodeId | None,
    expected_id: NodeId | None,
    timeout: float,
) -> NodeAnswer:
    """The node-info at ``address:port`` (raises ``probe.ProbeFailed``).

    A trusted member (``member``, or whoever an anonymous answer claims to be) is asked over
    mutual TLS only: one that refuses the handshake (it removed us, or someone else holds the
    address) is not reached. Only where anyone may answer (``expected_id`` is ``None``: a
    manual address) is a refused handshake followed by an anonymous question, whose answer
    then must come from a node other than the member.
    """
    mutual = contexts.context_for(member)
    if mutual is not None:
        try:
            info = await probe.fetch_node_info(
                session, address, port, expected_id=member, timeout=timeout, tls_context=mutual
            )
        except probe.NotReached:
            raise
        except probe.ProbeFailed as exc:
            if expected_id is not None:
                raise
            log.debug("member %s refused mutual TLS at %s (%s)", member, address, exc)
        else:
            return NodeAnswer(info, mutual=True)
    info = await probe.fetch_node_info(
        session, address, port, expected_id=expected_id, timeout=timeout
    )
    if mutual is not None and info.node_id == member:
        raise probe.ProbeFailed(
            f"{address}:{port} answers as member {member} without its pinned certificate"
        )
    if expected_id is None and contexts.context_for(info.node_id) is not None:
        # A member's node id answered anonymously: a hint, proven (or not) over its pinned TLS.
        return await ask_node_info(
            session,
            contexts,
            address,
            port,
            member=info.node_id,
            expected_id=info.node_id,
            timeout=timeout,
        )
    return NodeAnswer(info, mutual=False)
