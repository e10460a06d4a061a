"""The broker's side of exclusive operations: a lease on an engine from the proxy worker's
scheduler (docs/SCHEDULER.md). The worker answers ``proxy:exclusive`` once the engine is drained
and holds it until ``proxy:exclusive-end``; with no worker running nothing can be in flight, so
the operation goes ahead at once."""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Callable

from backend.components.engines.exclusive import ExclusiveKind
from backend.core.worker import WorkerProcess
from backend.protocol import errors
from backend.protocol.proxy import ExclusiveLease
from backend.protocol.worker_methods import PROXY_EXCLUSIVE, PROXY_EXCLUSIVE_END

log = logging.getLogger(__name__)

# Longer than any request may run (the proxy cuts a stalled stream long before): the caller's
# own bound (an RPC timeout) normally ends the wait first.
DRAIN_TIMEOUT_S = 24 * 3600.0


class WorkerGate:
    """An ``ExclusiveGate`` backed by the proxy worker's schedulers."""

    def __init__(self, worker: Callable[[], WorkerProcess | None]) -> None:
        self._worker = worker

    @contextlib.asynccontextmanager
    async def hold(
        self, engine: str, kind: ExclusiveKind, model: str | None = None
    ) -> AsyncIterator[None]:
        """Wait for the drained engine; release it on exit, also when the wait is abandoned."""
        worker = self._worker()
        lease = ExclusiveLease(engine=engine, kind=kind, lease=uuid.uuid4().hex, model=model)
        granted = False
        if worker is not None and worker.pid() is not None:
            try:
                await worker.call(
                    PROXY_EXCLUSIVE.name,
                    PROXY_EXCLUSIVE.encode_params(lease),
                    timeout=DRAIN_TIMEOUT_S,
                )
                granted = True
            except (errors.Unavailable, errors.ConnectionLost):
                log.info("no proxy worker to drain %s for %s; going ahead", engine, kind)
            except BaseException:
                worker.notify(PROXY_EXCLUSIVE_END.name, {"lease": lease.lease})
                raise
        try:
            yield
        finally:
            if granted:
                worker_now = self._worker()
                if worker_now is not None:
                    worker_now.notify(PROXY_EXCLUSIVE_END.name, {"lease": lease.lease})
