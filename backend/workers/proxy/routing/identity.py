"""What a requested model name means in one routing table: one model, whatever it is called.

A user's alias (``ProxyTargets.aliases``, NAME -> TARGET, one level) is read first, unless some
node lists NAME as it is (an alias never hides a real model). Then every model, on any engine of
any node, whose weights' digest (``RouteTarget.digests``) equals the digest of that name where a
node lists it, is the same model under another name: a replica. Each engine's own naming rule
(``naming.py``: Ollama's ``:latest`` and case) still decides when a node lists a name.

Everything here is a plain function of the table and the name; the answers are kept for the
table's life (the table is immutable, replaced whole). A table without digests and aliases
resolves every name to itself at the cost of one look-up per request.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from backend.protocol.proxy import ProxyTargets, RouteTarget
from backend.workers.proxy.routing.naming import has_model, normalize

# An engine and a model name normalized by its rule.
EngineName = tuple[str, str]


class Identity(msgspec.Struct, frozen=True):
    """A requested name resolved: ``model`` the name it stands for (the alias's target, or the
    name itself), ``digests`` its weights' digests where nodes list it (usually one), ``names``
    every ``(engine, normalized name)`` that means it. ``plain`` when it is the name as asked
    and no digest ties it to another name: every owner lists it as asked."""

    asked: str
    model: str
    digests: frozenset[str] = frozenset()
    names: frozenset[EngineName] = frozenset()

    @property
    def plain(self) -> bool:
        """Whether every owner lists the model under the asked name (nothing to rewrite)."""
        return not self.digests and self.model == self.asked

    def listed_by(self, target: RouteTarget) -> bool:
        """Whether ``target``'s inventory has this model under any of its names."""
        if self.plain:
            return has_model(target.engine, target.models, self.model)
        return own_name(self, target) is not None


def own_name(identity: Identity, target: RouteTarget) -> str | None:
    """The name ``target`` lists the model under (the asked one where it lists that, as
    asked), or None when it does not list it."""
    engine = target.engine
    wanted = normalize(engine, identity.model)
    if has_model(engine, target.models, identity.model):
        return identity.asked if identity.model == identity.asked else _spelled(target, wanted)
    if not identity.digests:
        return None
    found = [name for name in target.models if (engine, normalize(engine, name)) in identity.names]
    return min(found) if found else None


def _spelled(target: RouteTarget, wanted: str) -> str:
    """The name as ``target`` spells it (an alias's target may differ in case or tag)."""
    engine = target.engine
    return next(name for name in target.models if normalize(engine, name) == wanted)


def resolve(table: ProxyTargets, asked: str) -> Identity:
    """What ``asked`` means in ``table`` (kept for the table's life)."""
    cache = _renewed(table)
    found = cache.resolved.get(asked)
    if found is None:
        found = cache.resolved[asked] = _resolve(cache.index, table.aliases, asked)
    return found


def name_on(table: ProxyTargets, target: RouteTarget, asked: str) -> str:
    """The name ``target`` lists what ``asked`` means in ``table`` under (``asked`` itself
    where it lists that, or does not list the model at all)."""
    found = resolve(table, asked)
    return asked if found.plain else own_name(found, target) or asked


def name_at(target: RouteTarget, asked: str) -> str:
    """The name ``target`` is sent for a request that asked for ``asked``, as the last table
    resolved it (the one the attempt's candidates came from, or a newer one): ``asked`` itself
    (the same object) when the target lists it so or nothing else is known."""
    cache = _cache
    if cache.plain or cache.table is None:
        return asked  # no digest and no alias in the table: every name means itself
    found = cache.resolved.get(asked) or resolve(cache.table, asked)
    if found.plain:
        return asked
    key = (asked, target.node_id, target.engine)
    name = cache.names.get(key)
    if name is None:
        name = cache.names[key] = own_name(found, target) or asked
    return name


def names_of(table: ProxyTargets, asked: str) -> frozenset[EngineName]:
    """Every ``(engine, normalized name)`` that means what ``asked`` means in ``table``."""
    return resolve(table, asked).names


def digest_of(target: RouteTarget, name: str) -> str | None:
    """The digest of ``name`` as ``target`` lists it (by its engine's naming rule)."""
    return _digest(target.engine, target.digests, name)


def _digest(engine: str, digests: Mapping[str, str], name: str) -> str | None:
    if not digests:
        return None
    found = digests.get(name)
    if found is not None:
        return found
    wanted = normalize(engine, name)
    return next(
        (digest for listed, digest in digests.items() if normalize(engine, listed) == wanted),
        None,
    )


class _Index(msgspec.Struct, frozen=True):
    """One table's names and digests: per engine, each normalized name's digests; per
    digest, the names that carry it."""

    digests_of: Mapping[str, Mapping[str, frozenset[str]]]
    names_by_digest: Mapping[str, frozenset[EngineName]]
    any_digest: bool


def _index(table: ProxyTargets) -> _Index:
    digests_of: dict[str, dict[str, set[str]]] = {}
    by_digest: dict[str, set[EngineName]] = {}
    for engine, targets in table.engines.items():
        names = digests_of.setdefault(engine, {})
        for target in targets:
            for model in target.models:
                key = normalize(engine, model)
                digest = _digest(engine, target.digests, model)
                carried = names.setdefault(key, set())
                if digest is not None:
                    carried.add(digest)
                    by_digest.setdefault(digest, set()).add((engine, key))
    return _Index(
        {engine: _frozen(names) for engine, names in digests_of.items()},
        {digest: frozenset(names) for digest, names in by_digest.items()},
        bool(by_digest),
    )


def _frozen(names: dict[str, set[str]]) -> dict[str, frozenset[str]]:
    return {name: frozenset(digests) for name, digests in names.items()}


def _resolve(index: _Index, aliases: Mapping[str, str], asked: str) -> Identity:
    model = asked
    if aliases and not _listed(index, asked):
        target = aliases.get(asked.strip())
        if target is None and asked.endswith(":latest"):
            target = aliases.get(asked.removesuffix(":latest"))
        model = target if target is not None else asked
    if not index.any_digest:
        return Identity(asked, model, names=_own_names(index, model))
    digests = frozenset(
        digest
        for engine, names in index.digests_of.items()
        for digest in names.get(normalize(engine, model), ())
    )
    names = set(_own_names(index, model))
    for digest in digests:
        names |= index.names_by_digest.get(digest, frozenset())
    return Identity(asked, model, digests, frozenset(names))


def _listed(index: _Index, name: str) -> bool:
    return any(normalize(engine, name) in names for engine, names in index.digests_of.items())


def _own_names(index: _Index, model: str) -> frozenset[EngineName]:
    return frozenset(
        (engine, key)
        for engine, names in index.digests_of.items()
        if (key := normalize(engine, model)) in names
    )


# Answers for the last table (bounded: clients name any model they like).
_RESOLVED_CACHE = 1024


class _Cache(msgspec.Struct):
    table: ProxyTargets | None = None
    index: _Index = msgspec.field(default_factory=lambda: _Index({}, {}, False))
    resolved: dict[str, Identity] = msgspec.field(default_factory=dict)
    names: dict[tuple[str, str, str], str] = msgspec.field(default_factory=dict)
    plain: bool = True  # the table has no digest and no alias


_cache = _Cache()


def _renewed(table: ProxyTargets) -> _Cache:
    """The cache for ``table``, started over for a table not seen last (or when full)."""
    cache = _cache
    if cache.table is table and len(cache.resolved) < _RESOLVED_CACHE:
        return cache
    if cache.table is not table:
        cache.index = _index(table)
        cache.plain = not cache.index.any_digest and not table.aliases
    cache.table, cache.resolved, cache.names = table, {}, {}
    return cache
