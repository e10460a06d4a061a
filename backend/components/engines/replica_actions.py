"""``engine:action`` with replica marks: the model actions run as before, and what they did to
the marks is recorded once they succeeded (``replica_marks.py`` holds the rules).

A replica load (``replica``) of a model the engine already holds is the user's model and stays
unmarked. Unloading a marked replica of a one-model engine (llama.cpp, which otherwise refuses
an unload) serves again the model the replica replaced, or stops the engine when it served
nothing before; the user's models keep that refusal.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from backend.components.engines.replica_marks import (
    Marked,
    ModelUnloaded,
    ReplicaLoaded,
    SwitchedBack,
    UserLoaded,
)
from backend.protocol import errors
from backend.protocol.types.base import NodeId
from backend.protocol.types.engines import EngineActionParams, EngineActionResult, ReplicaMark

if TYPE_CHECKING:
    from backend.components.engines.component import EnginesComponent

_CLEARING = ("unload_model", "delete_model")
LocalAction = Callable[[EngineActionParams], Awaitable[EngineActionResult]]


def local_action(engines: EnginesComponent, node_id: NodeId) -> LocalAction:
    """``engine:action`` on this node's engines for this node's own replica planner: marks
    are recorded as for a call over RPC, by ``node_id``."""

    async def act(params: EngineActionParams) -> EngineActionResult:
        return await run_marked_action(engines, params, by=node_id)

    return act


async def run_marked_action(
    engines: EnginesComponent, params: EngineActionParams, *, by: NodeId | None
) -> EngineActionResult:
    """Run ``params``' action; record a replica load's mark, clear what a user's load, an
    unload or a delete makes stale. ``by``: the node whose planner asked (None: unknown)."""
    if params.replica and params.action != "load_model":
        raise errors.InvalidParams("only load_model can load a replica", {"action": params.action})
    controller = engines.controller(params.engine)
    single = controller.store is not None
    model = (params.model or "").strip()
    marked = engines.replica_marks.entry(controller.name, model) if model else None
    serving = single and controller.current_model == model
    if params.action == "unload_model" and marked is not None and serving:
        return await _switch_back(engines, marked)
    before = controller.current_model if single else None
    resident = before == model if single else model in _loaded(engines, controller.name)
    result = await engines.run_action(
        params.engine,
        params.action,
        params.model,
        url=params.url,
        sha256=params.sha256,
        across=params.across,
    )
    if params.action == "load_model" and params.replica:
        mark = ReplicaMark(
            loaded_at=engines.replica_marks.now(),
            reason=params.reason or "",
            by=by,
            ttl_s=params.ttl_s,
        )
        event = ReplicaLoaded(controller.name, model, mark, single, resident, before)
        engines.replica_marks.record(event)
    elif params.action == "load_model":
        engines.replica_marks.record(UserLoaded(controller.name, model, single))
    elif params.action in _CLEARING:
        engines.replica_marks.record(ModelUnloaded(controller.name, model))
    return result


async def _switch_back(engines: EnginesComponent, marked: Marked) -> EngineActionResult:
    """Unload a one-model engine's replica: serve the model it replaced again (through the
    gate, as any load), or stop the engine when it served nothing before."""
    if marked.replaced is not None:
        await engines.run_action(marked.engine, "load_model", marked.replaced)
    else:
        await engines.controller(marked.engine).stop()
    engines.replica_marks.record(SwitchedBack(marked.engine, marked.model))
    return EngineActionResult(ok=True)


def _loaded(engines: EnginesComponent, engine: str) -> list[str]:
    """What ``engine`` last listed as loaded (not asked again)."""
    return engines.last_models().get(engine, (None, None))[1] or []
