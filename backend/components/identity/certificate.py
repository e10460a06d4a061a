"""The node's TLS identity: an ECDSA P-256 key and a self-signed certificate naming its UUID.

Kept in ``<data_dir>/identity/`` (directory 0700, ``node.crt`` and ``node.key`` 0600). What a
user would expect, and what happens:

- First start: a key and certificate are minted. Where the OS keyring works, the key file is
  encrypted under a random passphrase kept in the keyring; otherwise (headless Linux) the key
  file is plain and ``protected_by`` says ``"file"``, so ``pair status`` can tell the user.
- Later starts: both are loaded, and the key must match the certificate.
- Key file missing, keyring entry gone, or a certificate naming another node: the start fails
  with an ``IdentityError`` saying what to restore or remove. Peers pin the exact certificate,
  so a silently re-minted one would look like a stranger to every computer paired before.
- No identity directory at all (the user removed it, as those messages suggest): a new one is
  minted, and ``origin`` says so, because peers must pair with this node again.
- The data directory was copied (identity.py gave the copy a new node id, ``first_run``): the
  copied identity is renamed aside and a new one minted, so two nodes never share a key.

Every call here blocks on files and the keyring: run it in a thread.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import re
import secrets
import shutil
import stat
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Literal, Protocol

import msgspec
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from msgspec.structs import replace

from backend.common.certificates import NodeCredentials, fingerprint_of
from backend.common.files import ensure_private_dir, fsync_dir, set_aside, write_private_atomic
from backend.protocol.types.base import NodeId

log = logging.getLogger(__name__)

KEYRING_SERVICE = "pair"
IDENTITY_DIR = "identity"
CERT_FILE = "node.crt"
KEY_FILE = "node.key"
# RFC 5280 §4.1.2.5: 99991231235959Z means "no well-defined expiration". OpenSSL checks the
# dates even on a pinned anchor and home computers have wrong clocks, so the window is as wide
# as X.509 allows; certificates are replaced by rotation, never by expiry.
NOT_BEFORE = datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC)
NOT_AFTER = datetime.datetime(9999, 12, 31, 23, 59, 59, tzinfo=datetime.UTC)
_DNS_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_ENCRYPTED_PEM = b"-----BEGIN ENCRYPTED PRIVATE KEY-----"

Protection = Literal["keyring", "file"]
Origin = Literal["loaded", "first-run", "re-created", "copy-replaced"]


class StoredIdentity(msgspec.Struct, frozen=True):
    """Credentials loaded or minted by ``load_or_mint``, how the key is kept, and why."""

    credentials: NodeCredentials
    protected_by: Protection
    origin: Origin
    directory: Path
    set_aside: Path | None = None  # where a copied identity was moved ("copy-replaced")


class PasswordVault(Protocol):
    """The part of the ``keyring`` API used here; raises ``KeyringError`` without a backend."""

    def get_password(self, service_name: str, username: str) -> str | None: ...

    def set_password(self, service_name: str, username: str, password: str) -> None: ...

    def delete_password(self, service_name: str, username: str) -> None: ...


class VaultUnavailable(Exception):
    """The keyring is turned off: nothing can be kept in it."""


class NoVault:
    """No keyring at all (``PAIR_KEYRING=off``): the key is kept as a plain 0600 file."""

    def get_password(self, service_name: str, username: str) -> str | None:
        """Nothing is ever stored."""
        return None

    def set_password(self, service_name: str, username: str, password: str) -> None:
        """Refused, as a machine without a keyring backend refuses."""
        raise VaultUnavailable("the keyring is turned off (PAIR_KEYRING=off)")

    def delete_password(self, service_name: str, username: str) -> None:
        """Nothing to delete."""
        raise VaultUnavailable("the keyring is turned off")


class OsKeyring:
    """The OS keyring (the ``keyring`` package), loaded on first use: a process whose key is a
    plain file never loads it (some 45 ms of a broker's start, and of every test broker's)."""

    def get_password(self, service_name: str, username: str) -> str | None:
        """The stored password, or None."""
        return _keyring().get_password(service_name, username)

    def set_password(self, service_name: str, username: str, password: str) -> None:
        """Store ``password``; the backend's error without one."""
        _keyring().set_password(service_name, username, password)

    def delete_password(self, service_name: str, username: str) -> None:
        """Forget the entry; the backend's error when it has none."""
        _keyring().delete_password(service_name, username)


def _keyring() -> PasswordVault:
    import keyring  # here, not at the top: see ``OsKeyring``

    return keyring


OS_KEYRING = OsKeyring()


def vault_from(environment: Mapping[str, str]) -> PasswordVault:
    """The OS keyring, unless ``PAIR_KEYRING=off`` (tests, or a user who wants plain files)."""
    return NoVault() if environment.get("PAIR_KEYRING") == "off" else OS_KEYRING


class IdentityError(Exception):
    """The stored identity cannot be used; the message says what happened and what to do."""

    def __init__(self, message: str, path: Path) -> None:
        super().__init__(message)
        self.path = path


class IdentityKeyMissing(IdentityError):
    """The certificate is there but its private key file is not."""


class IdentityKeyLocked(IdentityError):
    """The key file is encrypted and its passphrase is not in the keyring (or does not fit)."""


class IdentityKeyMismatch(IdentityError):
    """The private key does not belong to the certificate."""


class IdentityForeign(IdentityError):
    """The certificate names another node than this data directory's."""


class IdentityDamaged(IdentityError):
    """A file of the identity is missing, unreadable, or cannot be made private."""


def mint(node_id: NodeId) -> NodeCredentials:
    """A new ECDSA P-256 key and a self-signed certificate for ``node_id``."""
    return issue(node_id, ec.generate_private_key(ec.SECP256R1()))


def issue(node_id: NodeId, private_key: ec.EllipticCurvePrivateKey) -> NodeCredentials:
    """A self-signed certificate for ``node_id`` over ``private_key``, in the node profile."""
    if not _DNS_LABEL.fullmatch(node_id):
        raise ValueError(f"a node id must be a lowercase DNS label, got {node_id!r}")
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, node_id)])
    public_key = private_key.public_key()
    # A random serial keeps a re-issued certificate (same key, same name) distinct from the
    # old one: RFC 5280 §4.1.2.2 wants issuer and serial to name one certificate, and OpenSSL
    # and browsers cache and reject by that pair.
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOT_BEFORE)
        .not_valid_after(NOT_AFTER)
    )
    for extension, critical in _profile(node_id, public_key):
        builder = builder.add_extension(extension, critical=critical)
    certificate = builder.sign(private_key, hashes.SHA256())
    return _credentials(certificate, private_key)


def load_or_mint(
    data_dir: Path,
    node_id: NodeId,
    *,
    first_run: bool,
    vault: PasswordVault = OS_KEYRING,
) -> StoredIdentity:
    """This node's identity from ``data_dir``, minted where none exists (see the module doc)."""
    return IdentityStore(data_dir, vault).load_or_mint(node_id, first_run=first_run)


class IdentityStore:
    """Owns ``<data_dir>/identity/`` and the keyring entry ``pair`` / ``node-key:<node id>``."""

    def __init__(self, data_dir: Path, vault: PasswordVault = OS_KEYRING) -> None:
        self.directory = data_dir / IDENTITY_DIR
        self._vault = vault

    def load_or_mint(self, node_id: NodeId, *, first_run: bool) -> StoredIdentity:
        """Load the identity, or mint one; ``first_run``: ``node_id`` was minted this start."""
        if not self.directory.exists():
            origin: Origin = "first-run" if first_run else "re-created"
            if not first_run:
                log.warning(
                    "no TLS identity in %s for node %s: minting a new certificate; computers "
                    "paired with this node before must pair with it again",
                    self.directory,
                    node_id,
                )
            return self._mint_and_save(node_id, origin)
        if first_run and _named_node(self.directory / CERT_FILE) != node_id:
            # identity.py gave this data directory a new id because it is a copy: the key
            # here belongs to the original node and must not be shared with it.
            moved = set_aside(self.directory, "copied", int(time.time()))
            log.warning("identity copied from another node moved to %s", moved)
            return replace(self._mint_and_save(node_id, "copy-replaced"), set_aside=moved)
        return self.load(node_id)

    def load(self, node_id: NodeId) -> StoredIdentity:
        """The stored identity of ``node_id``; raises an ``IdentityError`` if it is unusable."""
        cert_path, key_path = self.directory / CERT_FILE, self.directory / KEY_FILE
        if not cert_path.is_file():
            raise IdentityDamaged(
                f"the certificate of this node is missing from {cert_path}; "
                f"{self._restore_or_remove()}",
                cert_path,
            )
        _make_private(self.directory, 0o700)
        certificate = self._read_certificate(cert_path, node_id)
        if not key_path.is_file():
            raise IdentityKeyMissing(
                f"the private key of this node is missing from {key_path}; "
                f"{self._restore_or_remove()}",
                key_path,
            )
        _make_private(cert_path, 0o600)
        _make_private(key_path, 0o600)
        private_key, protected_by = self._read_key(key_path, node_id)
        if private_key.public_key() != certificate.public_key():
            raise IdentityKeyMismatch(
                f"the private key in {key_path} does not belong to the certificate in "
                f"{cert_path}; {self._restore_or_remove()}",
                key_path,
            )
        credentials = _credentials(certificate, private_key)
        return StoredIdentity(credentials, protected_by, "loaded", self.directory)

    def _read_certificate(self, path: Path, node_id: NodeId) -> x509.Certificate:
        try:
            certificate = x509.load_pem_x509_certificate(path.read_bytes())
        except (OSError, ValueError) as error:
            raise IdentityDamaged(
                f"the certificate in {path} cannot be read ({error}); {self._restore_or_remove()}",
                path,
            ) from error
        named = _common_name(certificate)
        if named != node_id:
            raise IdentityForeign(
                f"{self.directory} holds the identity of node {named}, but this data "
                f"directory belongs to node {node_id}; put back this node's own {IDENTITY_DIR} "
                f"directory, or remove {self.directory} to make this computer a new node that "
                "pairs again",
                path,
            )
        return certificate

    def _read_key(
        self, path: Path, node_id: NodeId
    ) -> tuple[ec.EllipticCurvePrivateKey, Protection]:
        try:
            data = path.read_bytes()
        except OSError as error:
            raise IdentityDamaged(f"{path} cannot be read ({error})", path) from error
        encrypted = data.lstrip().startswith(_ENCRYPTED_PEM)
        password = self._passphrase(path, node_id) if encrypted else None
        try:
            key = serialization.load_pem_private_key(data, password)
        except (ValueError, TypeError) as error:
            kind = IdentityKeyLocked if encrypted else IdentityDamaged
            reason = "the passphrase in the keyring does not open it" if encrypted else error
            raise kind(
                f"the private key in {path} cannot be read ({reason}); {self._restore_or_remove()}",
                path,
            ) from error
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise IdentityDamaged(
                f"{path} holds no ECDSA key; {self._restore_or_remove()}",
                path,
            )
        return key, "keyring" if encrypted else "file"

    def _passphrase(self, path: Path, node_id: NodeId) -> bytes:
        username = _keyring_username(node_id)
        try:
            passphrase = self._vault.get_password(KEYRING_SERVICE, username)
        except Exception as error:  # backends raise their own errors too (D-Bus, COM)
            raise IdentityKeyLocked(
                f"the private key in {path} is encrypted with a passphrase kept in the OS "
                f"keyring, and no keyring can be reached now ({error}); start PAIR where the "
                "keyring is unlocked (your desktop session)",
                path,
            ) from error
        if passphrase is None:
            raise IdentityKeyLocked(
                f"the private key in {path} is encrypted, and its passphrase is gone from the "
                f"OS keyring (service {KEYRING_SERVICE!r}, entry {username!r}); restore that "
                f"entry, or remove {self.directory} to make this computer a new node that "
                "pairs again",
                path,
            )
        return passphrase.encode()

    def _mint_and_save(self, node_id: NodeId, origin: Origin) -> StoredIdentity:
        credentials = mint(node_id)
        passphrase = secrets.token_urlsafe(32)
        protected_by = _keep_passphrase(self._vault, node_id, passphrase)
        encryption: serialization.KeySerializationEncryption = (
            serialization.BestAvailableEncryption(passphrase.encode())
            if protected_by == "keyring"
            else serialization.NoEncryption()
        )
        key_pem = credentials.private_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
        )
        self._publish({CERT_FILE: credentials.cert_pem, KEY_FILE: key_pem})
        log.info("minted TLS identity %s (key kept by %s)", credentials.fingerprint, protected_by)
        return StoredIdentity(credentials, protected_by, origin, self.directory)

    def _publish(self, files: dict[str, bytes]) -> None:
        # Written into a staging directory and renamed into place, so the identity directory
        # exists only complete: any directory found later that lacks a file was damaged.
        staging = self.directory.with_name(f".{IDENTITY_DIR}.new")
        if staging.exists():
            shutil.rmtree(staging)
        ensure_private_dir(staging)
        os.chmod(staging, 0o700)
        for name, data in files.items():
            write_private_atomic(staging / name, data)
        os.replace(staging, self.directory)
        fsync_dir(self.directory.parent)

    def _restore_or_remove(self) -> str:
        return (
            f"restore {self.directory} from a backup, or remove {self.directory} to make this "
            "computer a new node that pairs again"
        )


def _profile(
    node_id: str, public_key: ec.EllipticCurvePublicKey
) -> list[tuple[x509.ExtensionType, bool]]:
    # The profile passes VERIFY_X509_STRICT (on by default in Python 3.13's default context).
    usage = x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=False,
        crl_sign=False,
        encipher_only=False,
        decipher_only=False,
    )
    purposes = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    return [
        (x509.BasicConstraints(ca=False, path_length=None), True),
        (usage, True),
        (x509.ExtendedKeyUsage(purposes), False),
        (x509.SubjectAlternativeName([x509.DNSName(f"{node_id}.node.invalid")]), False),
        (x509.SubjectKeyIdentifier.from_public_key(public_key), False),
        (x509.AuthorityKeyIdentifier.from_issuer_public_key(public_key), False),
    ]


def _credentials(
    certificate: x509.Certificate, private_key: ec.EllipticCurvePrivateKey
) -> NodeCredentials:
    der = certificate.public_bytes(serialization.Encoding.DER)
    pem = certificate.public_bytes(serialization.Encoding.PEM)
    return NodeCredentials(der, pem, private_key, fingerprint_of(der))


def _keep_passphrase(vault: PasswordVault, node_id: NodeId, passphrase: str) -> Protection:
    username = _keyring_username(node_id)
    try:
        vault.set_password(KEYRING_SERVICE, username, passphrase)
        kept = vault.get_password(KEYRING_SERVICE, username) == passphrase
    except Exception as error:  # backends raise their own errors too (D-Bus, COM)
        log.warning("no OS keyring (%s): the node's private key is kept in a 0600 file", error)
        return "file"
    if kept:
        return "keyring"
    # A backend that accepts a password and forgets it (keyring's "null" backend) would lock
    # the key away for good; a plain 0600 file is the better of the two.
    log.warning("the OS keyring does not keep passwords: the private key is kept in a 0600 file")
    with contextlib.suppress(Exception):
        vault.delete_password(KEYRING_SERVICE, username)
    return "file"


def _keyring_username(node_id: NodeId) -> str:
    return f"node-key:{node_id}"


def _named_node(cert_path: Path) -> str | None:
    try:
        return _common_name(x509.load_pem_x509_certificate(cert_path.read_bytes()))
    except (OSError, ValueError):
        return None


def _common_name(certificate: x509.Certificate) -> str | None:
    names = certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    value = names[0].value if names else None
    return value if isinstance(value, str) else None


def _make_private(path: Path, mode: int) -> None:
    # Fixed rather than refused: group- or world-readable modes come from restoring a backup or
    # copying with a loose umask, refusing would not undo a read that already happened, and
    # the fix is the chmod we would ask the user to type. It is logged so an exposure on a
    # shared computer can be judged (and the node re-paired with a new key).
    if os.name != "posix":
        return
    current = stat.S_IMODE(path.stat().st_mode)
    if current & 0o077 == 0:
        return
    try:
        os.chmod(path, mode)
    except OSError as error:
        raise IdentityDamaged(
            f"{path} is open to other users (mode {current:o}) and cannot be made private "
            f"({error}); fix its owner and mode, then start again",
            path,
        ) from error
    log.warning("%s was open to other users (mode %o); now %o", path, current, mode)
