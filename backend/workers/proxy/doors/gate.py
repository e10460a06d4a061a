"""Who may use a front door over plaintext: this computer, and other computers with a key.

This computer (a loopback peer) needs no key, but a loopback Host and, from a browser, a loopback
Origin: the Host check defeats DNS rebinding (a web page whose name resolves to 127.0.0.1 still
sends its own name as Host); the Origin check stops other web pages from driving the API from a
browser. Another computer passes only while the ``lan_access`` setting is on (403 otherwise) and
with ``Authorization: Bearer <a PAIR API key>`` (or, as Anthropic's clients send it,
``x-api-key: <key>``) whose hash the broker sent in the routing table (401 otherwise); its
Host names this computer on the network, so only its Origin is checked.

The broker binds the doors on loopback only while the setting is off and on every address
while it is on (``components/proxy/listeners.py``), so with it off another computer cannot
even connect; this gate still decides per request, so turning LAN access on or off, or
revoking a key, takes effect with the next routing table (within 0.1 s) on the connections
already open too, and nothing from the network gets past this check while the setting is off.
"""

from __future__ import annotations

import fnmatch
import functools
import hmac
import ipaddress
from collections.abc import Callable, Iterable
from typing import Literal, ParamSpec
from urllib.parse import urlsplit

import msgspec

from backend.common.secret_hash import hash_secret
from backend.protocol.proxy import DoorKey

P = ParamSpec("P")
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
# Who made a request that ``screen`` let pass from this computer (another's is its key's hash).
LOOPBACK = ""
# What clients ask to see that an engine is there, answered for any key: nothing about them
# changes the engine or tells more than that it runs and its version.
PROBE_PATHS = frozenset({"/", "/api/version", "/health"})
HOW_TO_GET_A_KEY = (
    "create one on the computer running PAIR with `pair api-key create NAME` and send it as "
    "`Authorization: Bearer <key>` (OPENAI_API_KEY for OpenAI clients) or `x-api-key: <key>` "
    "(ANTHROPIC_API_KEY for Anthropic clients)"
)
LAN_ACCESS_OFF = (
    "plaintext access is only allowed from this computer (loopback); to let other computers in,"
    " turn on the lan_access setting and give each one an API key (`pair api-key create NAME`)"
)
KEY_MISSING = f"an API key is required from another computer: {HOW_TO_GET_A_KEY}"
KEY_INVALID = f"the API key is not valid on this computer (revoked?): {HOW_TO_GET_A_KEY}"
HOST_NOT_LOCAL = "the Host header must name this computer (localhost, 127.0.0.1 or [::1])"
FOREIGN_ORIGIN = (
    "cross-origin requests from web pages that are not on this computer are refused (an origin"
    " such as a browser extension's can be allowed with the allowed_origins setting)"
)


def peer_allowed(peer_address: str | None) -> bool:
    """Whether the TCP peer is this computer (IPv4-mapped IPv6 addresses included)."""
    if not peer_address:
        return False
    return _is_loopback(peer_address)


@functools.lru_cache(maxsize=1024)  # asked per request; clients come from few addresses
def _is_loopback(peer_address: str) -> bool:
    try:
        address = ipaddress.ip_address(peer_address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def host_name(host_header: str) -> str | None:
    """The name in a Host header without its port (``[::1]:80`` gives ``::1``); None if invalid."""
    if host_header.startswith("["):
        name, bracket, rest = host_header[1:].partition("]")
        if not bracket or (rest and not _is_port_suffix(rest)):
            return None
        return name
    name, colon, port = host_header.partition(":")
    if colon and not port.isdigit():
        return None
    return name


@functools.lru_cache(maxsize=256)  # asked per request; clients send few Host values
def host_allowed(host_header: str | None) -> bool:
    """Whether a Host header names this computer (a missing header is HTTP/1.0, allowed)."""
    if host_header is None:
        return True
    name = host_name(host_header.strip())
    return name is not None and name.lower() in LOOPBACK_NAMES


def origin_allowed(origin: str | None, allowed: Iterable[str] = ()) -> bool:
    """Whether a browser Origin is absent, a loopback http(s) origin on any port, or one of
    the ``allowed_origins`` setting's patterns (``*`` matches any part, any case)."""
    if origin is None:
        return True
    if any(fnmatch.fnmatchcase(origin.lower(), pattern.lower()) for pattern in allowed):
        return True
    try:
        parts = urlsplit(origin)
        hostname = parts.hostname
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and hostname in LOOPBACK_NAMES


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header (the scheme in any case)."""
    if authorization is None:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def key_accepted(token: str, key_hashes: Iterable[str]) -> bool:
    """Whether ``token`` hashes to one of ``key_hashes``."""
    return accepted_hash(token, key_hashes) is not None


def accepted_hash(token: str, key_hashes: Iterable[str]) -> str | None:
    """The hash of ``token`` when it is one of ``key_hashes``, else None.

    Every stored hash is compared in constant time, and all of them are, so the time taken
    says nothing about which hash (or how much of one) matched.
    """
    if not token.isascii():
        return None  # no secret PAIR makes is anything else
    presented = hash_secret(token)
    encoded = presented.encode()
    matched = False
    for stored in key_hashes:
        matched |= hmac.compare_digest(stored.encode(), encoded)
    return presented if matched else None


class Refusal(msgspec.Struct, frozen=True):
    """Why a request is refused: 401 (no valid key) or 403, and the reason."""

    status: Literal[401, 403]
    message: str

    @property
    def kind(self) -> str:
        """The error type in the client API's shape."""
        return "authentication_error" if self.status == 401 else "forbidden"


def screen(
    peer_address: str | None,
    host_header: str | None,
    origin: str | None,
    *,
    authorization: str | None = None,
    api_key: str | None = None,
    lan_access: bool = False,
    key_hashes: Iterable[str] = (),
    allowed_origins: Iterable[str] = (),
) -> Refusal | str:
    """Why a request must be refused, else who makes it: ``LOOPBACK`` (this computer) or the
    hash of another computer's key (what it may do is the key's scope)."""
    client = LOOPBACK
    if not peer_allowed(peer_address):
        verdict = lan_verdict(
            authorization, lan_access=lan_access, key_hashes=key_hashes, api_key=api_key
        )
        if isinstance(verdict, Refusal):
            return verdict
        client = verdict
    elif not host_allowed(host_header):
        return Refusal(403, HOST_NOT_LOCAL)
    if not origin_allowed(origin, allowed_origins):
        return Refusal(403, FOREIGN_ORIGIN)
    return client


def _refusal_only(decide: Callable[P, Refusal | str]) -> Callable[P, Refusal | None]:
    """``decide`` narrowed to its refusals: who may pass matters only to the door itself."""

    def refusal(*args: P.args, **kwargs: P.kwargs) -> Refusal | None:
        verdict = decide(*args, **kwargs)
        return verdict if isinstance(verdict, Refusal) else None

    return refusal


# Why a request must be refused, or None when it may pass (the rules are the module's); it
# takes ``screen``'s arguments.
refusal = _refusal_only(screen)


def lan_verdict(
    authorization: str | None,
    *,
    lan_access: bool,
    key_hashes: Iterable[str],
    api_key: str | None = None,
) -> Refusal | str:
    """Why another computer's request must be refused, else the hash of its valid key (a
    bearer token, else ``x-api-key``)."""
    if not lan_access:
        return Refusal(403, LAN_ACCESS_OFF)
    token = bearer_token(authorization) or (api_key.strip() if api_key else None) or None
    if token is None:
        return Refusal(401, KEY_MISSING)
    hashed = accepted_hash(token, key_hashes)
    if hashed is None:
        return Refusal(401, KEY_INVALID)
    return hashed


def scope_refusal(key: DoorKey | None, method: str, path: str, engine: str) -> Refusal | None:
    """Why a LAN key may not send ``method path`` to ``engine`` through a door's pass-through
    (the engine's own paths: pull, delete, slots...), or None. A key the table does not
    describe has the inference scope; every key may probe that the engine is there."""
    if key is not None and key.scope == "admin":
        return None
    if method in ("GET", "HEAD") and path in PROBE_PATHS:
        return None
    return Refusal(403, admin_scope_needed(path, engine))


def admin_scope_needed(path: str, engine: str) -> str:
    """The 403 message for a path only an admin key may use."""
    return (
        f"this API key's scope is inference (the inference APIs and model lists); {path} is "
        f"{engine}'s own path on this computer and needs a key with the admin scope (create "
        "one on the computer running PAIR with `pair api-key create NAME --admin`)"
    )


def _is_port_suffix(text: str) -> bool:
    return text.startswith(":") and text[1:].isdigit()
