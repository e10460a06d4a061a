"""An attempt at this node's own engine waits for its scheduler's admission here.

Admitted at once in the common case. A request that has to wait is held with the broker
(``custody.py``) from its first pass-over until its answer starts, so a worker crash does not
lose it; a front-door request that waits may also move to another owner that frees up sooner
(``rebalance.py``), which ends this attempt with ``Moved``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiohttp import web

from backend.workers.proxy.channels.custody import Custody
from backend.workers.proxy.routing.admission import Admission, Dispatch
from backend.workers.proxy.routing.identity import name_at
from backend.workers.proxy.routing.naming import normalize
from backend.workers.proxy.routing.rebalance import Moved, Waiting
from backend.workers.proxy.routing.replies import load_failed
from backend.workers.proxy.scheduler.engine_scheduler import EngineScheduler, LoadFailed
from backend.workers.proxy.scheduler.sessions import pin_slot
from backend.workers.proxy.upstream.attempt import Failure


async def admit_local(
    scheduler: EngineScheduler,
    custody: Custody,
    waiting: Waiting,
    request: web.Request,
    admission: Admission,
    dispatch: Dispatch,
) -> bytes | Failure | Moved:
    """Wait for the scheduler to admit the request; the body, pinned to its slot."""
    engine = dispatch.target.engine
    model = normalize(engine, name_at(dispatch.target, admission.model))
    # Admitted at once in the common case, without a wait (or a coroutine) for it.
    dispatch.ticket = scheduler.admit_now(model, session=admission.session)
    if dispatch.ticket is None:
        hold = _holder(custody, request, admission, dispatch)
        entry = waiting.enter(admission, engine)
        try:
            dispatch.ticket = await scheduler.admit(
                model,
                session=admission.session,
                on_wait=hold,
                made=entry.made if entry is not None else None,
            )
        except LoadFailed as exc:
            return load_failed(engine, admission.model, exc)
        except asyncio.CancelledError:
            moved = waiting.leave(entry) if entry is not None else None
            if moved is not None:
                task = asyncio.current_task()
                if task is not None and task.uncancel() == 0:
                    return moved
                waiting.landed(moved.node)  # cancelled for its own reasons too: it ends
            raise
        finally:
            if entry is not None and not entry.done:
                waiting.leave(entry)
    dispatch.check_running()
    slot = dispatch.ticket.slot
    target = dispatch.target
    if slot is None or target.slot_api is None:
        return dispatch.body(admission)
    return pin_slot(dispatch.body(admission), target.slot_api.field, slot)


def _holder(
    custody: Custody, request: web.Request, admission: Admission, dispatch: Dispatch
) -> Callable[[], None]:
    """What holds a front-door request with the broker once it has to wait for its turn."""

    def hold() -> None:
        if admission.origin is None and admission.held is None:
            job = dispatch.job
            admission.held = custody.hold(request, admission.door, admission.body, job)

    return hold
