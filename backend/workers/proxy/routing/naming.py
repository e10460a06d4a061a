"""Each engine's rule for when two model names mean the same model."""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=4096)  # asked several times per request, of a few names
def normalize(engine: str, name: str) -> str:
    """The canonical form of ``name`` for ``engine`` (used for matching and deduplication).

    Ollama names are ``[host/][namespace/]model[:tag]`` with ``latest`` as the default tag and
    are matched case-insensitively; other engines compare names exactly (trimmed).
    """
    name = name.strip()
    if engine != "ollama" or not name:
        return name
    last_segment = name.rsplit("/", 1)[-1]
    if ":" not in last_segment:
        name = f"{name}:latest"
    return name.lower()


def same_model(engine: str, left: str, right: str) -> bool:
    """Whether ``left`` and ``right`` name the same model on ``engine``."""
    return normalize(engine, left) == normalize(engine, right)


def has_model(engine: str, inventory: list[str] | None, model: str) -> bool:
    """Whether an engine inventory advertises ``model`` (an unknown inventory has nothing)."""
    if not inventory:
        return False
    wanted = normalize(engine, model)
    return any(normalize(engine, name) == wanted for name in inventory)


def federate(engine: str, inventories: list[list[str]]) -> list[str]:
    """One list from several nodes' lists, each model once (first spelling kept), sorted."""
    seen: dict[str, str] = {}
    for names in inventories:
        for name in names:
            seen.setdefault(normalize(engine, name), name)
    return sorted(seen.values())
