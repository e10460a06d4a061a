"""LAN API keys (``apikeys:*``): listed without their secret."""

from __future__ import annotations

from typing import NewType

from backend.protocol.types.base import Wire

ApiKeyId = NewType("ApiKeyId", str)  # a LAN API key's public id (never part of its secret)


class ApiKeyInfo(Wire, frozen=True, kw_only=True):
    """A LAN API key as listed: never its secret, only a short public prefix to recognise it."""

    id: ApiKeyId
    name: str
    prefix: str  # the first characters of the secret (``pair-AbCd``)
    created_at: float
    last_used_at: float | None = None


class ApiKeyCreate(Wire, frozen=True, kw_only=True):
    """Parameters of ``apikeys:create``: a name of 1-64 printable characters (trimmed)."""

    name: str


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
