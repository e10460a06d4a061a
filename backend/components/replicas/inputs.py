"""The replica planner's inputs, gathered from what the broker already knows.

Demand comes from the proxy worker's ``proxy:demand`` reports (``DemandHistory`` keeps a
bounded window of ``WaitSample``s per model); the places a model could go come from discovery's
view of each trusted member (its node-info: engines, models on disk and resident, digests,
sizes, free memory, pending jobs) and this node's own engines (``EngineModels``). Everything
here is plain data and pure functions but the history, which is a small bounded buffer.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable, Mapping, Sequence

import msgspec

from backend.components.replicas.plan import Host, Replica, WaitSample
from backend.protocol.proxy import DemandReport, LocalUse
from backend.protocol.types.engines import EngineModels
from backend.protocol.types.nodes import DiscoveredNode, NodeEngineModels, NodeTelemetry

# llama.cpp's server holds one model: loading another replaces it.
SINGLE_MODEL_ENGINES = frozenset({"llamacpp"})
# Samples kept per model: a report about once a second over the longest (stable) window.
MAX_SAMPLES = 120
# A model nobody asked for this long is dropped from the history.
FORGET_AFTER_S = 600.0


class MemberView(msgspec.Struct, frozen=True):
    """One computer as a place for replicas: its engines' lists, its free memory (None:
    unknown) and its unfinished jobs."""

    node_id: str
    node_name: str
    engines: Mapping[str, NodeEngineModels]
    free_bytes: int | None = None
    pending_jobs: int = 0


class DemandHistory:
    """The recent demand per model (bounded: ``MAX_SAMPLES`` each, idle models forgotten),
    each model's weights digest where a report named it, and the last use of each local model."""

    def __init__(self, max_samples: int = MAX_SAMPLES) -> None:
        self._samples: dict[str, deque[WaitSample]] = {}
        self._digests: dict[str, str] = {}
        self._local: dict[tuple[str, str], LocalUse] = {}
        self._max = max_samples

    def add(self, report: DemandReport, names: Mapping[str, str] | None = None) -> None:
        """Take one report: a sample per model it names (``names``: node id -> name, for where
        the requests waited), and the local engines' use."""
        for demand in report.models:
            samples = self._samples.setdefault(demand.model, deque(maxlen=self._max))
            on = ", ".join((names or {}).get(owner, owner) for owner in demand.owners)
            samples.append(WaitSample(report.at, demand.requests, demand.wait_s, demand.queued, on))
            if demand.digest:
                self._digests[demand.model] = demand.digest
        for use in report.local:
            self._local[(use.engine, use.model)] = use
        for model in [m for m, s in self._samples.items() if report.at - s[-1].at > FORGET_AFTER_S]:
            del self._samples[model]
            self._digests.pop(model, None)

    def models(self) -> list[str]:
        """The models with recent demand, by name."""
        return sorted(self._samples)

    def samples(self, model: str) -> tuple[WaitSample, ...]:
        """The model's samples, oldest first."""
        return tuple(self._samples.get(model, ()))

    def digest(self, model: str) -> str | None:
        """The model's weights digest, where a report said it."""
        return self._digests.get(model)

    def local_use(self, engine: str, model: str) -> LocalUse | None:
        """When a request last ran on this node's ``engine``'s ``model``, and how many run now."""
        return self._local.get((engine, model))


def free_bytes(telemetry: NodeTelemetry | None) -> int | None:
    """Memory free for a model: the GPUs' free VRAM where they report it, else free RAM."""
    if telemetry is None or not telemetry.valid:
        return None
    vram = [
        gpu.vram_total_bytes - gpu.vram_used_bytes
        for gpu in telemetry.gpus or ()
        if gpu.vram_total_bytes is not None and gpu.vram_used_bytes is not None
    ]
    if vram:
        return max(sum(vram), 0)
    if telemetry.memory_total_bytes is None or telemetry.memory_used_bytes is None:
        return None
    return max(telemetry.memory_total_bytes - telemetry.memory_used_bytes, 0)


def member_views(nodes: Sequence[DiscoveredNode], members: Collection[str]) -> list[MemberView]:
    """The trusted ``members`` as discovery lists them (other nodes and engines are left out)."""
    return [
        MemberView(
            node_id=node.node_id,
            node_name=node.name,
            engines=dict(node.engines),
            free_bytes=free_bytes(node.telemetry),
            pending_jobs=(node.telemetry.pending_jobs or 0) if node.telemetry else 0,
        )
        for node in nodes
        if node.node_id in members and node.kind == "pair" and "self" not in node.sources
    ]


def own_view(
    node_id: str, node_name: str, models: EngineModels, self_node: DiscoveredNode | None
) -> MemberView:
    """This node as a place for replicas: its engines' lists, its figures from discovery."""
    engines: dict[str, NodeEngineModels] = {
        engine: NodeEngineModels(
            models=list(listed),
            loaded=list(models.loaded_by_engine.get(engine, [])),
            digests=dict(models.digests_by_engine.get(engine, {})),
            sizes=dict(models.sizes_by_engine.get(engine, {})),
        )
        for engine, listed in models.by_engine.items()
    }
    telemetry = self_node.telemetry if self_node is not None else None
    pending = (telemetry.pending_jobs or 0) if telemetry is not None else 0
    return MemberView(node_id, node_name, engines, free_bytes(telemetry), pending)


def name_for(listed: NodeEngineModels, model: str, digest: str | None) -> str | None:
    """The engine's own name for ``model``: the same name, else one with the same digest."""
    if model in (listed.models or ()) or model in (listed.loaded or ()):
        return model
    if digest is None:
        return None
    same = sorted(name for name, known in (listed.digests or {}).items() if known == digest)
    return same[0] if same else None


def hosts_for(
    model: str,
    digest: str | None,
    views: Iterable[MemberView],
    loading: Collection[str],
) -> tuple[Host, ...]:
    """Every member and engine that has ``model``'s weights (by name or digest); ``loading``
    holds the members where a load this planner started has not ended."""
    hosts: list[Host] = []
    for view in views:
        for engine, listed in sorted(view.engines.items()):
            name = name_for(listed, model, digest)
            if name is None:
                continue
            loaded = listed.loaded or []
            single = engine in SINGLE_MODEL_ENGINES
            hosts.append(
                Host(
                    node_id=view.node_id,
                    node_name=view.node_name,
                    engine=engine,
                    name=name,
                    resident=name in loaded,
                    on_disk=name in (listed.models or ()),
                    free_bytes=view.free_bytes,
                    model_bytes=(listed.sizes or {}).get(name),
                    single_model=single,
                    other_busy=single
                    and bool(loaded)
                    and name not in loaded
                    and view.pending_jobs > 0,
                    loading=view.node_id in loading,
                )
            )
    return tuple(hosts)


def serving_set(hosts: Iterable[Host]) -> frozenset[tuple[str, str]]:
    """The (member, engine) pairs where the model is resident now."""
    return frozenset((host.node_id, host.engine) for host in hosts if host.resident)


def held_replicas(models: EngineModels, history: DemandHistory) -> tuple[Replica, ...]:
    """This node's models a replica planner loaded (marked by the engines component), with
    their last use from the worker's reports."""
    held: list[Replica] = []
    for engine, marks in sorted(models.replicas_by_engine.items()):
        for name, mark in sorted(marks.items()):
            use = history.local_use(engine, name)
            held.append(
                Replica(
                    engine=engine,
                    name=name,
                    loaded_at=mark.loaded_at,
                    last_used_at=use.last_used_at if use is not None else None,
                    active=use.active if use is not None else 0,
                    ttl_s=mark.ttl_s,
                )
            )
    return tuple(held)
