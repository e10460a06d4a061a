"""CPace, suite CPACE-X25519-SHA512 (draft-irtf-cfrg-cpace-21), with explicit key confirmation.

Pure functions for each step of the draft, plus ``CPaceRun``: one side of one run in the
initiator-responder setting, followed by the mutual confirmation of §10.4. No I/O and no
logging; the secret scalar and K never leave a ``CPaceRun``.

Section numbers below refer to draft-irtf-cfrg-cpace-21. The Elligator2 map runs on CPython
integers and is not constant-time; that is acceptable for a single-use six-digit PIN behind an
attempt limit, where a timing attacker would have to share the inviting machine.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import secrets

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

DSI = b"CPace255"
DSI_ISK = DSI + b"_ISK"
MAC_LABEL = b"CPaceMac"
FIELD_SIZE_BYTES = 32
FIELD_SIZE_BITS = 255
HASH_BLOCK_BYTES = 128  # SHA-512's input block size, H.s_in_bytes in the draft
SHARE_BYTES = FIELD_SIZE_BYTES
TAG_BYTES = 64
# G.I, the neutral element; X25519 also yields it for every low-order input (§8.2).
IDENTITY = bytes(FIELD_SIZE_BYTES)

_P = 2**255 - 19
_A = 486662  # Curve25519's Montgomery coefficient (RFC 7748 §4.1)
_Z = 2  # the non-square that find_z_ell2 (Appendix A.5) yields for Curve25519


class CPaceError(ValueError):
    """A value CPace must abort on: a malformed, reflected or low-order share."""


class Role(enum.Enum):
    """Which side of an initiator-responder run this is; the initiator's message comes first."""

    INITIATOR = "initiator"
    RESPONDER = "responder"


def prepend_len(data: bytes) -> bytes:
    """``data`` preceded by its length in LEB128 (Appendix A.1.1)."""
    length = len(data)
    encoded = bytearray()
    while True:
        low_bits = length & 0x7F
        length >>= 7
        if length == 0:
            encoded.append(low_bits)
            return bytes(encoded) + data
        encoded.append(low_bits | 0x80)


def lv_cat(*parts: bytes) -> bytes:
    """The length-value concatenation of ``parts`` (Appendix A.1.3)."""
    return b"".join(prepend_len(part) for part in parts)


def generator_string(dsi: bytes, prs: bytes, ci: bytes, sid: bytes, s_in_bytes: int) -> bytes:
    """The string hashed into the generator, zero-padded after PRS (§8.1, Appendix A.2)."""
    # The padding makes DSI and PRS fill the hash's first block, so the hashed length does not
    # depend on the password's length; the "- 1" is the padding's own one-byte length prefix.
    len_zpad = max(0, s_in_bytes - 1 - len(prepend_len(prs)) - len(prepend_len(dsi)))
    return lv_cat(dsi, prs, bytes(len_zpad), ci, sid)


def decode_u_coordinate(data: bytes, bits: int = FIELD_SIZE_BITS) -> int:
    """RFC 7748's decodeUCoordinate: little-endian, with the bits above ``bits`` cleared."""
    if len(data) != (bits + 7) // 8:
        raise ValueError(f"a {bits}-bit coordinate takes {(bits + 7) // 8} bytes")
    return int.from_bytes(data, "little") & ((1 << bits) - 1)


def encode_u_coordinate(u: int) -> bytes:
    """RFC 7748's encodeUCoordinate for Curve25519: the canonical 32 little-endian bytes."""
    return (u % _P).to_bytes(FIELD_SIZE_BYTES, "little")


def elligator2(r: int) -> int:
    """The u-coordinate Elligator2 maps field element ``r`` to on Curve25519 (Appendix A.5)."""
    # 1 + Z*r^2 is never zero: that would make -1/2 a square, and it is not modulo p.
    v = -_A * pow(1 + _Z * r * r, -1, _P) % _P
    curve_value = (v * v * v + _A * v * v + v) % _P
    # Euler's criterion: 1 when curve_value is a square (v is then on the curve), p - 1 when not
    # (then -v - A is); never 0 here, since v != 0 and A^2 - 4 is not a square.
    epsilon = pow(curve_value, (_P - 1) // 2, _P)
    half_a = _A * pow(2, -1, _P)
    return (epsilon * v - (1 - epsilon) * half_a) % _P


def calculate_generator(prs: bytes, ci: bytes, sid: bytes) -> bytes:
    """G_X25519.calculate_generator with SHA-512: the password-derived base point (§8.2)."""
    gen_str = generator_string(DSI, prs, ci, sid, HASH_BLOCK_BYTES)
    gen_str_hash = hashlib.sha512(gen_str).digest()[:FIELD_SIZE_BYTES]
    return encode_u_coordinate(elligator2(decode_u_coordinate(gen_str_hash)))


def sample_scalar() -> bytes:
    """G_X25519.sample_scalar: 32 uniformly random bytes (X25519 clamps them)."""
    return secrets.token_bytes(FIELD_SIZE_BYTES)


def scalar_mult_vfy(scalar: bytes, point: bytes) -> bytes:
    """X25519(scalar, point), or ``IDENTITY`` where ``point`` is malformed or of low order."""
    private_key = X25519PrivateKey.from_private_bytes(scalar)
    try:
        result = private_key.exchange(X25519PublicKey.from_public_bytes(point))
    except ValueError:
        # OpenSSL refuses an all-zero output (RFC 7748 §6.1), which is exactly what low-order
        # points on the curve or its twist produce; a wrong length is refused the same way.
        return IDENTITY
    return IDENTITY if hmac.compare_digest(result, IDENTITY) else result


def transcript_ir(ya: bytes, ada: bytes, yb: bytes, adb: bytes) -> bytes:
    """The initiator-responder transcript: the initiator's message, then the responder's."""
    return lv_cat(ya, ada) + lv_cat(yb, adb)


def intermediate_session_key(sid: bytes, k: bytes, transcript: bytes) -> bytes:
    """ISK = SHA-512(lv_cat(DSI_ISK, sid, K) || transcript) (§7.2)."""
    return hashlib.sha512(lv_cat(DSI_ISK, sid, k) + transcript).digest()


def confirmation_mac_key(sid: bytes, isk: bytes) -> bytes:
    """mac_key = SHA-512(b"CPaceMac" || sid || ISK) (§10.4)."""
    return hashlib.sha512(MAC_LABEL + sid + isk).digest()


def confirmation_tag(mac_key: bytes, share: bytes, ad: bytes) -> bytes:
    """HMAC-SHA512 over the message a party sent, lv_cat(share, ad) (§10.4)."""
    return hmac.new(mac_key, lv_cat(share, ad), hashlib.sha512).digest()


class CPaceRun:
    """One side of one CPace run: share, receive the peer's message once, confirm, then ISK.

    Owns the secret scalar, dropped once the peer's share is processed, and the ISK, released
    only after the peer's confirmation tag verified. Any failure ends the run.
    """

    def __init__(
        self,
        role: Role,
        prs: bytes,
        ci: bytes,
        sid: bytes,
        own_ad: bytes,
        *,
        scalar: bytes | None = None,
    ) -> None:
        # An empty password would run the PAKE on public data alone (magic-wormhole.rs #193).
        if not prs:
            raise ValueError("CPace needs a non-empty password")
        self._role = role
        self._sid = sid
        self._own_ad = own_ad
        self._scalar: bytes | None = sample_scalar() if scalar is None else scalar
        self._share = scalar_mult_vfy(self._scalar, calculate_generator(prs, ci, sid))
        if self._share == IDENTITY:  # the map hit a low-order point: probability about 2^-252
            raise CPaceError("the generator is of low order")
        self._peer: tuple[bytes, bytes] | None = None
        self._isk = b""
        self._mac_key = b""
        self._verified: bool | None = None

    @property
    def role(self) -> Role:
        """This side's role."""
        return self._role

    @property
    def share(self) -> bytes:
        """This side's public share (Ya for the initiator, Yb for the responder)."""
        return self._share

    def receive(self, peer_share: bytes, peer_ad: bytes) -> None:
        """Take the peer's message and derive the ISK; raise ``CPaceError`` when CPace aborts."""
        scalar, self._scalar = self._scalar, None
        if scalar is None:
            raise RuntimeError("this run has already received the peer's message")
        if len(peer_share) != SHARE_BYTES:
            raise CPaceError(f"the peer's share must be {SHARE_BYTES} bytes")
        # Echoing our own share back is a reflection attack (compare CVE-2020-26558).
        if hmac.compare_digest(peer_share, self._share):
            raise CPaceError("the peer's share equals ours")
        k = scalar_mult_vfy(scalar, peer_share)
        if hmac.compare_digest(k, IDENTITY):
            raise CPaceError("the peer's share is a low-order point")
        self._peer = (peer_share, peer_ad)
        self._isk = intermediate_session_key(self._sid, k, self._transcript(peer_share, peer_ad))
        self._mac_key = confirmation_mac_key(self._sid, self._isk)

    def tag(self) -> bytes:
        """This side's confirmation tag, over the message it sent."""
        self._require_received()
        if self._verified is False:
            raise RuntimeError("this run failed confirmation")
        return confirmation_tag(self._mac_key, self._share, self._own_ad)

    def verify(self, peer_tag: bytes) -> bool:
        """Whether the peer's tag is right, compared in constant time; callable once."""
        peer_share, peer_ad = self._require_received()
        if self._verified is not None:
            raise RuntimeError("this run has already checked the peer's tag")
        expected = confirmation_tag(self._mac_key, peer_share, peer_ad)
        self._verified = hmac.compare_digest(expected, peer_tag)
        return self._verified

    @property
    def isk(self) -> bytes:
        """The intermediate session key, available once the peer's tag verified."""
        if self._verified is not True:
            raise RuntimeError("the ISK is released only after the peer's tag verified")
        return self._isk

    def _require_received(self) -> tuple[bytes, bytes]:
        if self._peer is None:
            raise RuntimeError("this run has not received the peer's message")
        return self._peer

    def _transcript(self, peer_share: bytes, peer_ad: bytes) -> bytes:
        if self._role is Role.INITIATOR:
            return transcript_ir(self._share, self._own_ad, peer_share, peer_ad)
        return transcript_ir(peer_share, peer_ad, self._share, self._own_ad)
