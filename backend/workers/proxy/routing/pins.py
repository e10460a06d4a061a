"""A client naming where its model runs: ``model@node`` or ``<engine>/model``.

A name any node lists as it is always means that model (LM Studio's own names carry ``@``, and
Ollama's may have a namespace). Only a name that matches nothing is read as a pin: the part
after the last ``@`` naming a node (its id or name, any case) keeps the request to that node;
a first segment that is an engine's name (``ollama``, ``lmstudio``, ``llamacpp``) to that
engine. Both can be combined (``llamacpp/tiny@gpu-box``). The bare name may be any name of the
model (an alias, or a replica's name on another engine: ``identity.py``); the engine gets its
own name for it.
"""

from __future__ import annotations

import msgspec

from backend.protocol.proxy import ProxyTargets, RouteTarget
from backend.workers.proxy.doors.wire import Dialect
from backend.workers.proxy.routing.candidates import ENGINE_ORDER, candidates, engine_targets
from backend.workers.proxy.routing.identity import resolve


class Pinned(msgspec.Struct, frozen=True):
    """The bare model name and the only targets that may serve it (in order)."""

    model: str
    only: list[RouteTarget]


def pinned(table: ProxyTargets, name: str, dialect: Dialect) -> Pinned | None:
    """The pin ``name`` makes, or None when it names no pin that some node can serve."""
    model, node = _split_node(table, name)
    engine = None
    head, _, rest = model.partition("/")
    if rest and head.lower() in ENGINE_ORDER:
        engine, model = head.lower(), rest
    if node is None and engine is None:
        return None
    found = [
        target
        for target in _all_owners(table, model, dialect)
        if (node is None or target.node_id == node) and (engine is None or target.engine == engine)
    ]
    return Pinned(model, found) if found else None


def _split_node(table: ProxyTargets, name: str) -> tuple[str, str | None]:
    model, at, suffix = name.rpartition("@")
    if not at or not model:
        return name, None
    wanted = suffix.strip().lower()
    for targets in table.engines.values():
        for target in targets:
            if wanted in (target.node_id.lower(), target.name.lower()):
                return model, target.node_id
    return name, None


def _all_owners(table: ProxyTargets, model: str, dialect: Dialect) -> list[RouteTarget]:
    """Every engine of every node that has ``model`` under any of its names (not one per
    node: a pin picks)."""
    first = candidates(table, model, dialect)
    identity = resolve(table, model)
    rest = [
        target
        for target in engine_targets(table)
        if identity.listed_by(target) and target not in first
    ]
    return first + rest
