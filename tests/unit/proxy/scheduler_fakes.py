"""An engine scheduler over a fake llama-server-like engine, and requests submitted to it as
tasks (no sockets, no processes): the set-up of the scheduler's tests."""

from __future__ import annotations

import asyncio

from backend.workers.proxy.scheduler.engine_scheduler import (
    EngineScheduler,
    EngineShape,
    LoadFailed,
    SlotSample,
    Ticket,
)
from tests.fakes import FakeClock


class FakeEngine:
    """A llama-server-like engine: slots, some taken by traffic PAIR did not send, erases and
    model loads, all recorded in ``log`` in the order the scheduler asked for them."""

    def __init__(self, slots: int = 2, *, slot_ids: bool = True) -> None:
        self.slots = slots
        self.slot_ids = slot_ids
        self.foreign: set[int] = set()
        self.log: list[str] = []
        self.samples = 0
        self.erase_fails = False
        self.park_fails = False
        self.files: dict[str, int] = {}
        self.load_fails: dict[str, str] = {}
        self.load_gate: asyncio.Event | None = None
        self.read_gate: asyncio.Event | None = None
        self.instance = 1

    async def free_slots(self) -> SlotSample | None:
        self.samples += 1
        idle = tuple(i for i in range(self.slots) if i not in self.foreign)
        if self.read_gate is not None:  # the answer is on its way (as it was when read)
            await self.read_gate.wait()
        return SlotSample(len(idle), idle if self.slot_ids else None)

    async def erase(self, slot: int) -> None:
        self.log.append(f"erase {slot}")
        await asyncio.sleep(0)
        if self.erase_fails:
            raise RuntimeError("erase answered 501")

    async def save(self, slot: int, filename: str) -> int:
        self.log.append(f"save {slot}")
        if self.park_fails:
            raise RuntimeError("save answered 400")
        self.files[filename] = slot
        return 1000

    async def restore(self, slot: int, filename: str) -> None:
        self.log.append(f"restore {slot}")
        if filename not in self.files:
            raise RuntimeError("restore answered 400")

    async def discard(self, filenames: list[str]) -> None:
        for name in filenames:
            self.files.pop(name, None)

    async def load(self, model: str) -> int:
        self.log.append(f"load {model}")
        if self.load_gate is not None:
            await self.load_gate.wait()
        if model in self.load_fails:
            raise LoadFailed(self.load_fails[model])
        self.instance += 1
        return self.instance


def pinned(
    slots: int = 2,
    *,
    resident: str = "a",
    single: bool = True,
    instance: int = 1,
    parking: bool = False,
) -> EngineShape:
    """A llama-server's shape: one model at a time, every request pinned to a slot."""
    return EngineShape(
        slots=slots,
        single_model=single,
        resident=(resident,),
        instance=instance,
        pinning=True,
        parking=parking,
    )


def make(
    engine: FakeEngine,
    shape: EngineShape,
    *,
    changes: list[int] | None = None,
    affinity: bool = True,
    clock: FakeClock | None = None,
) -> EngineScheduler:
    """A scheduler of ``engine`` configured with ``shape``; each change appends to
    ``changes``."""
    scheduler = EngineScheduler(
        "llamacpp",
        engine,
        clock=clock or FakeClock(),
        on_change=(lambda: changes.append(1)) if changes is not None else (lambda: None),
        poll_s=0.5,
        affinity=affinity,
    )
    scheduler.configure(shape)
    return scheduler


async def settle(rounds: int = 20) -> None:
    """Let the scheduler's passes and the requests' tasks run."""
    for _ in range(rounds):
        await asyncio.sleep(0)


class Requests:
    """Requests submitted to a scheduler as tasks; ``admitted`` in the order they got in."""

    def __init__(self, scheduler: EngineScheduler, engine: FakeEngine) -> None:
        self.scheduler = scheduler
        self.engine = engine
        self.tasks: dict[str, asyncio.Task[Ticket]] = {}
        self.admitted: list[str] = []

    def submit(self, name: str, model: str = "a", session: str | None = None) -> None:
        """Ask for ``model`` as ``name``; once admitted it is logged as run on its slot."""

        async def run() -> Ticket:
            ticket = await self.scheduler.admit(model, session=session)
            self.admitted.append(name)
            self.engine.log.append(f"run {name}@{ticket.slot}")
            return ticket

        self.tasks[name] = asyncio.get_running_loop().create_task(run())

    def operation(self, name: str, kind: str, model: str = "") -> None:
        """Ask for an exclusive operation of ``kind`` as ``name``."""

        async def run() -> Ticket:
            ticket = await self.scheduler.admit(model, kind=kind)
            self.admitted.append(name)
            self.engine.log.append(f"op {name}")
            return ticket

        self.tasks[name] = asyncio.get_running_loop().create_task(run())

    def finish(self, *names: str, finished: bool = True) -> None:
        """The admitted ``names`` end (``finished``: the engine is done with them)."""
        for name in names:
            self.scheduler.release(self.tasks[name].result(), finished=finished)

    async def cleanup(self) -> None:
        """Cancel what still waits and end the scheduler's tasks."""
        for task in self.tasks.values():
            task.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        await self.scheduler.aclose()


class Schedulers:
    """Builds schedulers of fake engines, each with its ``Requests``, and cleans them all up
    (the ``scheduled`` fixture)."""

    def __init__(self) -> None:
        self._made: list[Requests] = []

    def __call__(
        self,
        shape: EngineShape,
        *,
        engine_slots: int | None = None,
        slot_ids: bool = True,
        changes: list[int] | None = None,
        affinity: bool = True,
        clock: FakeClock | None = None,
    ) -> Requests:
        """Requests to a scheduler configured with ``shape``, over an engine of
        ``engine_slots`` slots (the shape's count unless given), on ``clock`` if given."""
        slots = shape.slots if engine_slots is None else engine_slots
        engine = FakeEngine(slots, slot_ids=slot_ids)
        scheduler = make(engine, shape, changes=changes, affinity=affinity, clock=clock)
        requests = Requests(scheduler, engine)
        self._made.append(requests)
        return requests

    async def cleanup(self) -> None:
        """Cancel every request still waiting and end every scheduler's tasks."""
        for requests in self._made:
            await requests.cleanup()
