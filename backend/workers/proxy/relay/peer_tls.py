"""The proxy worker's side of trust: the relay's pinned listener and a client context per peer.

The broker sends the node's identity once (``proxy:identity``) and the trusted members'
certificates with every table (``ProxyTargets.trusted``). The relay listener is a
``PinnedServer`` whose pins follow those tables; its handshake requires a client certificate.
Outgoing requests to a peer use a client context that shows our certificate and trusts only
that peer's, built once per certificate: aiohttp keys its connection pool on the SSL context,
so each peer gets its own pool of kept-alive TLS connections.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Iterable

import aiohttp
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from backend.common import tls
from backend.common.certificates import NodeCredentials, fingerprint_of
from backend.protocol.proxy import ProxyIdentity, ProxyTargets, RouteTarget

log = logging.getLogger(__name__)

ClientTls = ssl.SSLContext | bool


class NoIdentity(aiohttp.ClientConnectionError):
    """A peer cannot be dialled before the broker has sent this node's identity."""


def credentials_from(identity: ProxyIdentity) -> NodeCredentials:
    """The ``NodeCredentials`` in a ``proxy:identity`` payload; raises ``ValueError``."""
    certificate = x509.load_pem_x509_certificate(identity.cert_pem.encode())
    key = serialization.load_pem_private_key(identity.key_pem.encode(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError("the node key is not an ECDSA key")
    if key.public_key() != certificate.public_key():
        raise ValueError("the node key does not belong to the certificate")
    der = certificate.public_bytes(serialization.Encoding.DER)
    return NodeCredentials(der, identity.cert_pem.encode(), key, fingerprint_of(der))


class PeerTls:
    """Owns the relay's server context and the per-peer client contexts (no tasks, no sockets)."""

    def __init__(self) -> None:
        self._credentials: NodeCredentials | None = None
        self._server: tls.PinnedServer | None = None
        self._pins: frozenset[bytes] = frozenset()
        self._clients: dict[bytes, ssl.SSLContext] = {}

    @property
    def has_identity(self) -> bool:
        """Whether the broker's identity arrived (the relay can serve, peers can be dialled)."""
        return self._credentials is not None

    def adopt_identity(self, credentials: NodeCredentials) -> None:
        """Use ``credentials`` from now on (the broker sends them once per worker)."""
        self._credentials = credentials
        self._clients.clear()
        server = tls.PinnedServer(credentials, self._pins)
        # CERT_REQUIRED: a client without a certificate fails the handshake. OpenSSL copies the
        # listener's verify mode into each connection when it is accepted; the context swapped
        # in by the pinned server's callback brings the current pins as trust anchors.
        server.context.verify_mode = ssl.CERT_REQUIRED
        self._server = server

    def server_context(self) -> ssl.SSLContext:
        """The relay listener's context; raises ``NoIdentity`` before the identity arrived."""
        if self._server is None:
            raise NoIdentity("this node's identity has not arrived yet")
        return self._server.context

    def follow(self, targets: ProxyTargets) -> None:
        """Adopt a new table's trusted members and forget contexts of peers it dropped."""
        pins = frozenset(targets.trusted)
        if pins != self._pins:
            self._pins = pins
            if self._server is not None:
                self._server.set_pins(pins)
            log.info("relay trusts %d paired computer(s)", len(pins))
        self._forget_except(
            target.cert_der
            for found in targets.engines.values()
            for target in found
            if target.cert_der is not None
        )

    def is_pinned(self, der: bytes | None) -> bool:
        """Whether ``der`` is the certificate of a member trusted now (checked per request)."""
        return tls.pinned_peer(der, self._pins)

    def client_tls(self, target: RouteTarget) -> ClientTls:
        """What aiohttp's ``ssl=`` gets for ``target``: a pinned context for a peer, else the
        default (a plain-HTTP engine ignores it; a peer without a pin would fail verification).

        Raises ``NoIdentity`` for a pinned peer before the identity arrived.
        """
        der = target.cert_der
        if target.kind != "peer" or der is None:
            return True
        context = self._clients.get(der)
        if context is None:
            if self._credentials is None:
                raise NoIdentity(f"cannot reach {target.node_id}: no identity yet")
            context = tls.client_context(self._credentials, der)
            self._clients[der] = context
        return context

    def _forget_except(self, kept: Iterable[bytes]) -> None:
        keep = set(kept)
        for der in [der for der in self._clients if der not in keep]:
            del self._clients[der]
