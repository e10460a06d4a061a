"""Which model a one-model engine holds and which run of it the scheduler knows
(``Residency``): the scheduler's own switch retires the run before it, so a routing table
older than that switch cannot bring the old model back, while a run it did not cause (a
restart, a crash, a switch asked through the broker) is noticed (docs/SCHEDULER.md, "Slot
ownership")."""

from __future__ import annotations

import msgspec

from backend.workers.proxy.scheduler.rules import EngineShape, relaunched_elsewhere


class Residency(msgspec.Struct):
    """The resident model, the one being loaded, the engine's run (``instance``) and the runs
    the scheduler's own switches left behind."""

    resident: str | None = None
    loading: str | None = None
    instance: int = 0
    retired: set[int] = msgspec.field(default_factory=set)

    def adopt(self, shape: EngineShape) -> bool:
        """Take the table's view; True when it shows a run the scheduler did not cause (its
        slots, and what they held, are new), whose resident model it then takes."""
        loading = self.loading is not None
        if relaunched_elsewhere(shape, self.instance, self.retired, loading=loading):
            self._run(shape.instance)
            self.resident = shape.resident[0] if shape.resident else None
            return True
        if self.resident is None and shape.resident and not loading:
            self.resident = shape.resident[0]
        return False

    def loaded(self, model: str, instance: int) -> None:
        """The scheduler's own switch relaunched the engine with ``model`` as ``instance``."""
        self._run(instance)
        self.resident = model

    def _run(self, instance: int) -> None:
        if self.instance:
            self.retired.add(self.instance)
        self.instance = instance
