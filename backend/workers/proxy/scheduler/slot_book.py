"""Who last ran on each engine slot, and which idle slot a request gets (docs/SCHEDULER.md,
"Slot ownership"); which slot a request gets and whether it is erased first are the pure
``rules.choose_slot`` and ``rules.hand_over``.

An entry per slot names the session whose KV it holds (None: a keyless request, an owner nobody
can prove to be); no entry means the slot is fresh since the engine launched. ``free`` is the
decision pass's own list of idle slot ids that may still be handed out, each at most once.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from backend.protocol.types.scheduler import SlotOwners
from backend.workers.proxy.scheduler.rules import choose_slot


class SlotBook(msgspec.Struct):
    """The slot owners of one engine and the idle ids of the current decision pass."""

    affinity: bool = True
    owners: dict[int, str | None] = msgspec.field(default_factory=dict)
    free: list[int] | None = None
    _used: dict[int, int] = msgspec.field(default_factory=dict)  # slot -> when last handed out
    _clock: int = 0

    def sampled(self, idle: Iterable[int], held: Iterable[int]) -> int:
        """A new pass read the engine's idle ids: keep those no running request holds (one
        admitted moments ago may not have reached the engine, which then still shows its slot
        idle). Returns how many may be handed out."""
        taken = set(held)
        ids = [slot for slot in idle if slot not in taken]
        self.free = ids or None
        return len(ids)

    def choose(self, session: str | None) -> int | None:
        """Take the idle slot ``session`` gets (``rules.choose_slot``); None when the pass has
        none."""
        slot = choose_slot(
            self.free or (), self.owners, self._used, session, affinity=self.affinity
        )
        if slot is not None and self.free is not None:
            self.free.remove(slot)
        return slot

    def owned_by(self, slot: int, session: str | None) -> None:
        """``session`` runs on ``slot`` now."""
        self.owners[slot] = session
        self._clock += 1
        self._used[slot] = self._clock

    def unknown(self, slot: int) -> None:
        """An erase failed: the request runs unpinned, wherever the engine puts it, so neither
        ``slot`` nor any idle slot can be vouched for."""
        for idle in [slot, *(self.free or [])]:
            self.owners[idle] = None

    def forget(self) -> None:
        """The engine relaunched: every slot is fresh."""
        self.owners.clear()
        self._used.clear()
        self.free = None

    def counts(self, slots: int, *, parked: int = 0) -> SlotOwners:
        """Owners as counts for ``engine:scheduler`` (``parked``: conversations whose KV waits
        in a file)."""
        keyless = sum(1 for owner in self.owners.values() if owner is None)
        return SlotOwners(
            sessions=len(self.owners) - keyless,
            keyless=keyless,
            fresh=max(0, slots - len(self.owners)),
            parked=parked,
        )
