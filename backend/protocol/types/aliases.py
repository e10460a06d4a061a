"""Model aliases (``models:alias*``): another name for a model on this computer's front doors."""

from __future__ import annotations

from backend.protocol.types.base import Wire

# The rules the broker checks (``backend/components/aliases/rules.py``), here for clients too.
MAX_ALIAS_LENGTH = 200
MAX_ALIASES = 256


class ModelAlias(Wire, frozen=True, kw_only=True):
    """``name`` reaches the model ``target`` at this computer's front doors."""

    name: str
    target: str
    created_at: float  # Unix time


class AliasSet(Wire, frozen=True, kw_only=True):
    """Parameters of ``models:alias-set``: a name (1-200 characters, no spaces, trimmed) and
    the model it stands for (not itself an alias)."""

    name: str
    target: str


class AliasRef(Wire, frozen=True, kw_only=True):
    """Parameters of ``models:alias-remove``: the alias to forget."""

    name: str
