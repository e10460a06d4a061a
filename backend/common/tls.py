"""TLS contexts for talking to peers: each side trusts exactly the certificates it pinned.

A pinned certificate is the only trust anchor of its context, so OpenSSL itself rejects a peer
showing anything else: a client pinning the wrong server fails in the handshake before a byte
is sent. The server asks for a client certificate but does not require one, so node-info and
pairing stay reachable without one; handlers tell peers apart with ``pinned_peer``.

Two OpenSSL behaviours shape this module (CPython 3.11, OpenSSL 3.0):

- ``CERT_OPTIONAL`` still verifies a certificate that is offered: a client showing a
  certificate the server has not pinned is refused. In TLS 1.3 the client's side of the
  handshake is over by then, so it sees the refusal as an EOF on its first read.
- A TLS 1.3 session ticket resumes a session without the client certificate, and tickets
  outlive a swap of the pins: a removed peer could resume and pass. Server contexts therefore
  issue no tickets.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import ssl
import tempfile
from collections.abc import Collection, Iterable

from cryptography.hazmat.primitives import serialization

from backend.common.certificates import NodeCredentials

PeerSource = asyncio.BaseTransport | ssl.SSLObject | ssl.SSLSocket | None


def server_context(credentials: NodeCredentials, pins: Iterable[bytes]) -> ssl.SSLContext:
    """A TLS 1.3 server context showing our certificate; ``pins`` (DER) are the only anchors."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _harden(context)
    _load_credentials(context, credentials)
    context.verify_mode = ssl.CERT_OPTIONAL
    # OpenSSL resumes a TLS 1.3 session without asking for the client certificate again.
    context.num_tickets = 0
    _trust(context, pins)
    return context


def client_context(
    credentials: NodeCredentials, peer_cert_der: bytes, *next_cert_ders: bytes
) -> ssl.SSLContext:
    """A TLS 1.3 client context showing our certificate and trusting only that peer's.

    ``next_cert_ders`` are certificates the peer announced it will switch to (rotation).
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _harden(context)
    _load_credentials(context, credentials)
    # The name is not checked: the pinned certificate is the identity, and peers are reached
    # by address.
    context.check_hostname = False
    context.verify_mode = ssl.CERT_REQUIRED
    _trust(context, (peer_cert_der, *next_cert_ders))
    return context


def unverified_client_context(credentials: NodeCredentials | None) -> ssl.SSLContext:
    """A TLS 1.3 client context that accepts any server, for node-info and pairing.

    The server's certificate is read afterwards with ``peer_certificate``. Pass ``credentials``
    only to a server expected to pin them: a server refuses a certificate it has not pinned.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _harden(context)
    if credentials is not None:
        _load_credentials(context, credentials)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


class PinnedServer:
    """The listening context of the node API; ``set_pins`` applies to the next handshake.

    Pass ``context`` to the listener once. Each handshake is moved to the context holding the
    current pins from ``sni_callback`` (which runs with or without SNI), so a roster change
    needs no listener restart. Connections already open keep their old verdict: check
    ``is_pinned`` per request as well.
    """

    def __init__(self, credentials: NodeCredentials, pins: Iterable[bytes] = ()) -> None:
        self._credentials = credentials
        self._pins = frozenset(pins)
        self._current = server_context(credentials, self._pins)
        # The listener itself trusts nobody, so a handshake the callback missed fails closed.
        self.context = server_context(credentials, ())
        self.context.sni_callback = self._on_client_hello

    @property
    def pins(self) -> frozenset[bytes]:
        """The certificates (DER) trusted for new handshakes."""
        return self._pins

    def set_pins(self, pins: Iterable[bytes]) -> None:
        """Trust exactly ``pins`` from the next handshake on."""
        pins = frozenset(pins)
        # Built before it is published, so a handshake sees the old set or the new, whole.
        current = server_context(self._credentials, pins)
        self._current, self._pins = current, pins

    def is_pinned(self, der: bytes | None) -> bool:
        """Whether ``der`` is one of the current pins."""
        return pinned_peer(der, self._pins)

    def _on_client_hello(
        self, ssl_object: ssl.SSLObject, server_name: str | None, context: ssl.SSLContext
    ) -> None:
        ssl_object.context = self._current


def peer_certificate(source: PeerSource) -> bytes | None:
    """The DER certificate the other side showed, or None (no TLS, or no certificate).

    A transport is asked for its ``ssl_object`` whatever its class: uvloop's transports are
    not ``asyncio.BaseTransport`` subclasses."""
    if source is not None and not isinstance(source, ssl.SSLObject | ssl.SSLSocket):
        source = source.get_extra_info("ssl_object")
    if not isinstance(source, ssl.SSLObject | ssl.SSLSocket):
        return None
    return source.getpeercert(binary_form=True)


def pinned_peer(der: bytes | None, pins: Collection[bytes]) -> bool:
    """Whether ``der`` is byte for byte one of ``pins``.

    Not constant-time, and it need not be: certificates are public (every server shows its
    own to anyone who connects), so timing could reveal nothing an attacker lacks, and a
    certificate is worthless without the private key the handshake proved.
    """
    return der is not None and der in pins


def _harden(context: ssl.SSLContext) -> None:
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    # Strict X.509 checks, as Python 3.13's default context has; our profile passes them.
    context.verify_flags |= ssl.VERIFY_X509_STRICT


def _trust(context: ssl.SSLContext, ders: Iterable[bytes]) -> None:
    pem = "".join(ssl.DER_cert_to_PEM_cert(der) for der in ders)
    if pem:  # an empty cadata is an error; no anchors means no peer verifies
        context.load_verify_locations(cadata=pem)


def _load_credentials(context: ssl.SSLContext, credentials: NodeCredentials) -> None:
    # The ssl module loads a key only from a file. The file holds the key encrypted under a
    # one-use password that never leaves memory, and is removed at once: what reaches the disk
    # is useless even if removal fails.
    password = secrets.token_bytes(32)
    key_pem = credentials.private_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(password),
    )
    fd, name = tempfile.mkstemp(prefix="pair-tls-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(credentials.cert_pem + key_pem)
        context.load_cert_chain(name, password=password)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(name)
