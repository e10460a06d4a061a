"""Answers that say only that a request was done, or how much it did."""

from __future__ import annotations

from backend.protocol.types.base import Wire


class Ok(Wire, frozen=True, kw_only=True):
    """An answer that only says the request was done."""

    ok: bool = True


class Unsubscribed(Wire, frozen=True, kw_only=True):
    """Answer to every ``<stream>:unsubscribe``."""

    subscribed: bool = False


class Removed(Wire, frozen=True, kw_only=True):
    """Answer to ``nodes:remove``."""

    removed: bool = True


class Cleared(Wire, frozen=True, kw_only=True):
    """Answer to ``jobs:clear``: how many finished jobs were removed."""

    cleared: int
