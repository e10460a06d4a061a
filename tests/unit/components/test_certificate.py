"""The node certificate: its profile, and how the key pair is kept, loaded and refused."""

from __future__ import annotations

import datetime
import hashlib
import logging
import os
import re
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

import keyring
import keyring.core
import keyring.errors
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from backend.common.certificates import fingerprint_of
from backend.components.identity.certificate import (
    CERT_FILE,
    KEY_FILE,
    KEYRING_SERVICE,
    IdentityDamaged,
    IdentityForeign,
    IdentityKeyLocked,
    IdentityKeyMismatch,
    IdentityKeyMissing,
    IdentityStore,
    StoredIdentity,
    issue,
    load_or_mint,
    mint,
)
from backend.protocol.types.base import NodeId


class FakeVault:
    """A keyring that works, kept in a dict."""

    def __init__(self) -> None:
        self.entries: dict[tuple[str, str], str] = {}

    def get_password(self, service_name: str, username: str) -> str | None:
        return self.entries.get((service_name, username))

    def set_password(self, service_name: str, username: str, password: str) -> None:
        self.entries[(service_name, username)] = password

    def delete_password(self, service_name: str, username: str) -> None:
        self.entries.pop((service_name, username), None)


class NoVault:
    """No keyring backend at all, as on headless Linux."""

    def get_password(self, service_name: str, username: str) -> str | None:
        raise keyring.errors.NoKeyringError("no backend")

    def set_password(self, service_name: str, username: str, password: str) -> None:
        raise keyring.errors.NoKeyringError("no backend")

    def delete_password(self, service_name: str, username: str) -> None:
        raise keyring.errors.NoKeyringError("no backend")


class ForgetfulVault(FakeVault):
    """A backend that accepts passwords and keeps none (keyring's "null" backend)."""

    def set_password(self, service_name: str, username: str, password: str) -> None:
        pass


Kind = TypeVar("Kind", bound=x509.ExtensionType)


def _node() -> NodeId:
    return NodeId(str(uuid.uuid4()))


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _files(identity: StoredIdentity) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(identity.directory.iterdir())}


def _extension(certificate: x509.Certificate, kind: type[Kind]) -> x509.Extension[Kind]:
    return certificate.extensions.get_extension_for_class(kind)


# --- the profile


def test_the_certificate_names_the_node_in_its_subject_and_san() -> None:
    node = _node()
    certificate = x509.load_der_x509_certificate(mint(node).cert_der)
    assert certificate.subject == certificate.issuer
    assert certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == node
    san = _extension(certificate, x509.SubjectAlternativeName)
    assert not san.critical
    assert san.value.get_values_for_type(x509.DNSName) == [f"{node}.node.invalid"]


def test_the_certificate_carries_the_node_profile_extensions() -> None:
    certificate = x509.load_der_x509_certificate(mint(_node()).cert_der)
    basic = _extension(certificate, x509.BasicConstraints)
    assert basic.critical and basic.value == x509.BasicConstraints(ca=False, path_length=None)
    usage = _extension(certificate, x509.KeyUsage)
    assert usage.critical and usage.value.digital_signature
    assert not (usage.value.key_cert_sign or usage.value.crl_sign or usage.value.key_agreement)
    purposes = _extension(certificate, x509.ExtendedKeyUsage)
    assert list(purposes.value) == [
        ExtendedKeyUsageOID.SERVER_AUTH,
        ExtendedKeyUsageOID.CLIENT_AUTH,
    ]
    subject_key = _extension(certificate, x509.SubjectKeyIdentifier).value
    authority_key = _extension(certificate, x509.AuthorityKeyIdentifier).value
    assert subject_key == x509.SubjectKeyIdentifier.from_public_key(certificate.public_key())
    assert authority_key.key_identifier == subject_key.digest
    assert len(certificate.extensions) == 6


def test_the_certificate_is_valid_from_2000_to_the_end_of_9999() -> None:
    certificate = x509.load_der_x509_certificate(mint(_node()).cert_der)
    utc = datetime.UTC
    assert certificate.not_valid_before_utc == datetime.datetime(2000, 1, 1, tzinfo=utc)
    end = datetime.datetime(9999, 12, 31, 23, 59, 59, tzinfo=utc)
    assert certificate.not_valid_after_utc == end


def test_the_key_is_p256_and_the_certificate_is_self_signed_with_sha256() -> None:
    credentials = mint(_node())
    certificate = x509.load_der_x509_certificate(credentials.cert_der)
    public_key = certificate.public_key()
    assert isinstance(public_key, ec.EllipticCurvePublicKey)
    assert isinstance(public_key.curve, ec.SECP256R1)
    assert isinstance(certificate.signature_hash_algorithm, hashes.SHA256)
    certificate.verify_directly_issued_by(certificate)
    assert credentials.private_key.public_key() == public_key


def test_serials_are_random_and_a_reissue_is_a_different_certificate() -> None:
    node = _node()
    first = mint(node)
    again = issue(node, first.private_key)
    serials = {x509.load_der_x509_certificate(c.cert_der).serial_number for c in (first, again)}
    assert len(serials) == 2 and all(serial > 2**64 for serial in serials)
    assert again.cert_der != first.cert_der and again.fingerprint != first.fingerprint


def test_the_fingerprint_is_sha256_of_the_der_in_lowercase_hex() -> None:
    credentials = mint(_node())
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", credentials.fingerprint)
    expected = "sha256:" + hashlib.sha256(credentials.cert_der).hexdigest()
    assert credentials.fingerprint == fingerprint_of(credentials.cert_der) == expected
    pem = x509.load_der_x509_certificate(credentials.cert_der).public_bytes(
        serialization.Encoding.PEM
    )
    assert credentials.cert_pem == pem


@pytest.mark.parametrize("bad", ["Upper-Case", "has space", "-leading", "dot.ted", "x" * 64, ""])
def test_a_node_id_that_is_no_dns_label_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="DNS label"):
        mint(NodeId(bad))


# --- storage


def test_first_run_mints_into_a_private_directory_with_private_files(tmp_path: Path) -> None:
    identity = load_or_mint(tmp_path, _node(), first_run=True, vault=FakeVault())
    assert identity.origin == "first-run" and identity.set_aside is None
    assert identity.directory == tmp_path / "identity"
    assert _mode(identity.directory) == 0o700
    assert sorted(_files(identity)) == [CERT_FILE, KEY_FILE]
    assert all(_mode(path) == 0o600 for path in identity.directory.iterdir())
    stored = x509.load_pem_x509_certificate((identity.directory / CERT_FILE).read_bytes())
    assert stored.public_bytes(serialization.Encoding.DER) == identity.credentials.cert_der


def test_with_a_keyring_the_key_file_is_encrypted_and_loads_back(tmp_path: Path) -> None:
    node, vault = _node(), FakeVault()
    minted = load_or_mint(tmp_path, node, first_run=True, vault=vault)
    assert minted.protected_by == "keyring"
    assert list(vault.entries) == [(KEYRING_SERVICE, f"node-key:{node}")]
    key_pem = (minted.directory / KEY_FILE).read_bytes()
    assert key_pem.startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY-----")
    with pytest.raises(TypeError):
        serialization.load_pem_private_key(key_pem, None)
    loaded = load_or_mint(tmp_path, node, first_run=False, vault=vault)
    assert loaded.origin == "loaded" and loaded.protected_by == "keyring"
    assert loaded.credentials == minted.credentials
    private = loaded.credentials.private_key.private_numbers()
    assert private == minted.credentials.private_key.private_numbers()


@pytest.mark.parametrize("vault", [NoVault(), ForgetfulVault()], ids=["none", "forgetful"])
def test_without_a_working_keyring_the_key_is_plain_and_reported(
    tmp_path: Path, vault: FakeVault | NoVault
) -> None:
    node = _node()
    minted = load_or_mint(tmp_path, node, first_run=True, vault=vault)
    assert minted.protected_by == "file"
    key_pem = (minted.directory / KEY_FILE).read_bytes()
    assert key_pem.startswith(b"-----BEGIN PRIVATE KEY-----")
    assert _mode(minted.directory / KEY_FILE) == 0o600
    loaded = load_or_mint(tmp_path, node, first_run=False, vault=vault)
    assert loaded.protected_by == "file" and loaded.credentials == minted.credentials


@pytest.fixture
def failing_system_keyring() -> Iterator[None]:
    """keyring's own "fail" backend behind the real module, restored afterwards."""
    before = keyring.get_keyring()
    keyring.set_keyring(keyring.core.load_keyring("keyring.backends.fail.Keyring"))
    try:
        yield
    finally:
        keyring.set_keyring(before)


@pytest.mark.usefixtures("failing_system_keyring")
def test_the_real_keyring_module_with_the_fail_backend_means_a_plain_file(tmp_path: Path) -> None:
    identity = load_or_mint(tmp_path, _node(), first_run=True)
    assert identity.protected_by == "file"


def test_a_deleted_key_file_fails_loudly_and_nothing_is_reminted(tmp_path: Path) -> None:
    node, vault = _node(), FakeVault()
    minted = load_or_mint(tmp_path, node, first_run=True, vault=vault)
    (minted.directory / KEY_FILE).unlink()
    before = _files(minted)
    with pytest.raises(IdentityKeyMissing) as caught:
        load_or_mint(tmp_path, node, first_run=False, vault=vault)
    message = str(caught.value)
    assert str(minted.directory / KEY_FILE) in message
    assert "from a backup" in message
    assert f"remove {minted.directory}" in message and "pairs again" in message
    assert caught.value.path == minted.directory / KEY_FILE
    assert _files(minted) == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["identity"]


def test_a_keyring_entry_gone_fails_loudly(tmp_path: Path) -> None:
    node, vault = _node(), FakeVault()
    minted = load_or_mint(tmp_path, node, first_run=True, vault=vault)
    before = _files(minted)
    vault.entries.clear()
    with pytest.raises(IdentityKeyLocked, match="passphrase is gone from the OS keyring") as caught:
        load_or_mint(tmp_path, node, first_run=False, vault=vault)
    assert f"node-key:{node}" in str(caught.value)
    assert _files(minted) == before and vault.entries == {}


def test_a_keyring_that_is_unreachable_now_fails_loudly(tmp_path: Path) -> None:
    node = _node()
    minted = load_or_mint(tmp_path, node, first_run=True, vault=FakeVault())
    with pytest.raises(IdentityKeyLocked, match="no keyring can be reached"):
        load_or_mint(tmp_path, node, first_run=False, vault=NoVault())
    assert (minted.directory / KEY_FILE).read_bytes().startswith(b"-----BEGIN ENCRYPTED")


def test_a_wrong_passphrase_in_the_keyring_fails_loudly(tmp_path: Path) -> None:
    node, vault = _node(), FakeVault()
    load_or_mint(tmp_path, node, first_run=True, vault=vault)
    vault.entries[(KEYRING_SERVICE, f"node-key:{node}")] = "not-the-passphrase"
    with pytest.raises(IdentityKeyLocked, match="does not open it"):
        load_or_mint(tmp_path, node, first_run=False, vault=vault)


def test_a_certificate_for_another_node_fails_loudly(tmp_path: Path) -> None:
    other, vault = _node(), FakeVault()
    minted = load_or_mint(tmp_path, other, first_run=True, vault=vault)
    before = _files(minted)
    node = _node()
    with pytest.raises(IdentityForeign) as caught:
        load_or_mint(tmp_path, node, first_run=False, vault=vault)
    assert other in str(caught.value) and node in str(caught.value)
    assert _files(minted) == before


def test_a_key_that_does_not_belong_to_the_certificate_fails_loudly(tmp_path: Path) -> None:
    node, vault = _node(), FakeVault()
    minted = load_or_mint(tmp_path, node, first_run=True, vault=NoVault())
    stranger = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    (minted.directory / KEY_FILE).write_bytes(stranger)
    with pytest.raises(IdentityKeyMismatch, match="does not belong"):
        load_or_mint(tmp_path, node, first_run=False, vault=vault)


@pytest.mark.parametrize(("name", "content"), [(CERT_FILE, None), (CERT_FILE, b"junk")])
def test_a_missing_or_damaged_certificate_fails_loudly(
    tmp_path: Path, name: str, content: bytes | None
) -> None:
    node = _node()
    minted = load_or_mint(tmp_path, node, first_run=True, vault=NoVault())
    path = minted.directory / name
    if content is None:
        path.unlink()
    else:
        path.write_bytes(content)
    with pytest.raises(IdentityDamaged, match="certificate"):
        load_or_mint(tmp_path, node, first_run=False, vault=NoVault())
    assert (minted.directory / KEY_FILE).exists()


def test_a_removed_identity_directory_is_minted_again_and_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    node = _node()
    with caplog.at_level(logging.WARNING):
        identity = load_or_mint(tmp_path, node, first_run=False, vault=FakeVault())
    assert identity.origin == "re-created"
    assert "must pair with it again" in caplog.text


def test_a_copied_data_directory_gets_its_own_key_and_keeps_the_copy_aside(tmp_path: Path) -> None:
    original, vault = _node(), FakeVault()
    copied = load_or_mint(tmp_path, original, first_run=True, vault=vault)
    copy_files = _files(copied)
    successor = _node()
    identity = load_or_mint(tmp_path, successor, first_run=True, vault=vault)
    assert identity.origin == "copy-replaced" and identity.set_aside is not None
    assert identity.set_aside.name.startswith("identity.copied-")
    assert {path.name: path.read_bytes() for path in identity.set_aside.iterdir()} == copy_files
    assert identity.credentials.cert_der != copied.credentials.cert_der
    assert (KEYRING_SERVICE, f"node-key:{original}") in vault.entries  # the original's entry
    assert load_or_mint(tmp_path, successor, first_run=False, vault=vault).origin == "loaded"


def test_first_run_flag_with_this_nodes_own_identity_just_loads_it(tmp_path: Path) -> None:
    node, vault = _node(), FakeVault()
    minted = load_or_mint(tmp_path, node, first_run=True, vault=vault)
    again = load_or_mint(tmp_path, node, first_run=True, vault=vault)
    assert again.origin == "loaded" and again.credentials == minted.credentials


def test_loose_permissions_are_made_private_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    node = _node()
    minted = load_or_mint(tmp_path, node, first_run=True, vault=NoVault())
    os.chmod(minted.directory, 0o755)
    os.chmod(minted.directory / KEY_FILE, 0o644)
    with caplog.at_level(logging.WARNING):
        load_or_mint(tmp_path, node, first_run=False, vault=NoVault())
    assert _mode(minted.directory) == 0o700 and _mode(minted.directory / KEY_FILE) == 0o600
    assert "open to other users (mode 644)" in caplog.text


def test_a_staging_directory_left_by_a_crash_is_replaced(tmp_path: Path) -> None:
    staging = tmp_path / ".identity.new"
    staging.mkdir()
    (staging / KEY_FILE).write_bytes(b"half a key")
    identity = IdentityStore(tmp_path, FakeVault()).load_or_mint(_node(), first_run=True)
    assert not staging.exists()
    assert sorted(_files(identity)) == [CERT_FILE, KEY_FILE]
