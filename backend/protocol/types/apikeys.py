"""LAN API keys (``apikeys:*``): listed without their secret."""

from __future__ import annotations

from typing import Literal, NewType

from backend.protocol.types.base import Wire

ApiKeyId = NewType("ApiKeyId", str)  # a LAN API key's public id (never part of its secret)
# ``inference``: the inference APIs and model lists; ``admin`` also this computer's engines'
# own paths through the doors (pull, delete, create, slots...), granted only when asked for.
ApiKeyScope = Literal["inference", "admin"]
API_KEY_SCOPES: tuple[ApiKeyScope, ...] = ("inference", "admin")


class ApiKeyInfo(Wire, frozen=True, kw_only=True):
    """A LAN API key as listed: never its secret, only a short public prefix to recognise it."""

    id: ApiKeyId
    name: str
    prefix: str  # the first characters of the secret (``pair-AbCd``)
    created_at: float
    last_used_at: float | None = None  # Unix time; reported by the doors in batches
    scope: ApiKeyScope = "inference"


class ApiKeyCreate(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """Parameters of ``apikeys:create``: a name of 1-64 printable characters (trimmed) and
    what the key may do (inference unless ``admin`` is asked for)."""

    name: str
    scope: ApiKeyScope = "inference"


class ApiKeyCreated(Wire, frozen=True, kw_only=True):
    """Answer to ``apikeys:create``: the key and its secret, the only time it is sent."""

    key: ApiKeyInfo
    secret: str

    def __repr__(self) -> str:
        # Never print the secret, whatever logs or tracebacks show this answer.
        return f"ApiKeyCreated(key={self.key!r}, secret=<hidden>)"


class ApiKeyRef(Wire, frozen=True, kw_only=True):
    """Parameters of ``apikeys:revoke``: the key to revoke."""

    id: ApiKeyId


class KeysUsed(Wire, frozen=True, kw_only=True):
    """The LAN API keys the front doors admitted since their last report: each key's hash and
    when it was last used (Unix time). Sent at most once per ``KEY_USE_REPORT_S``."""

    used: dict[str, float]


# How often the doors report key use: ``last_used_at`` is this late at most, and the broker
# writes it at most this often however busy the doors are.
KEY_USE_REPORT_S = 15.0
