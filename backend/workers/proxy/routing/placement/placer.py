"""The router's placement state: GPU pressure, measured speeds, the round-robin turn.

``Placer.choose`` turns the candidates the routing loop offers (already in pin, priority, this
node, node id order; a pin is honoured before this runs) into ``inputs.Candidate`` values and
applies the table's policy. ``round_robin`` (the benchmark's baseline) takes the owners in turn
by node id, ignoring load.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec

from backend.core.clock import Clock
from backend.protocol.proxy import PlacementPolicy, ProxyTargets, RouteTarget
from backend.workers.proxy.routing.naming import normalize, same_model
from backend.workers.proxy.routing.placement import pair, reference
from backend.workers.proxy.routing.placement.inputs import Candidate, NodeId
from backend.workers.proxy.routing.placement.measure import OutputMeter, SpeedBook

# What a (node, model) teaches is a moving average: one dispatch per this many seconds is
# sampled (its first byte, its generation), the others are only placed. Sampling every request
# of a busy door would cost it more than it teaches.
SAMPLE_EVERY_S = 0.05


class Placed(msgspec.Struct, frozen=True, gc=False):
    """Where a request went and what placement knew then (for what it learns afterwards)."""

    candidate: Candidate
    engine: str
    model: str
    dispatched_at: float

    @property
    def free_slot(self) -> bool:
        """Whether the node had a slot free for it when it was placed."""
        return self.candidate.queue < self.candidate.slots


class Placer:
    """Gathers each candidate's inputs and picks one by the table's policy."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self.pressure = reference.PressureBook()
        self.speeds = SpeedBook()
        self._turn = 0
        # Each (node, engine, model)'s slots and residency, as the current table says.
        self._shapes: dict[tuple[NodeId, str, str], tuple[int, bool | None]] = {}
        # When each (node, model) last had a dispatch sampled (``sampling``).
        self._sampled: dict[tuple[NodeId, str], float] = {}

    def table_changed(self, targets: ProxyTargets) -> None:
        """Take the table's GPU samples; forget nodes it no longer lists."""
        self._shapes = {}
        now = self._clock.wall()
        for node, sample in targets.gpu.items():
            self.pressure.observe(node, sample, now)
        present = {t.node_id for found in targets.engines.values() for t in found}
        self.pressure.keep_only(present | set(targets.gpu))
        # Kept across tables (they come with every change of load): sampling goes on as it was.
        self._sampled = {key: at for key, at in self._sampled.items() if key[0] in present}

    def candidates(
        self,
        engine: str,
        model: str,
        found: Sequence[RouteTarget],
        *,
        loads: Callable[[NodeId], tuple[int, int]],
        affinity: NodeId | None = None,
    ) -> list[Candidate]:
        """Each target's inputs; ``loads`` gives a node's (pending, reserved)."""
        name = normalize(engine, model)
        now_wall, now = self._clock.wall(), self._clock.monotonic()
        placed: list[Candidate] = []
        for target in found:
            node = target.node_id
            pending, reserved = loads(node)
            shape = self._shapes.get((node, engine, name))
            if shape is None:
                shape = (slots_for(target, engine, name), resident(target, engine, name))
                self._shapes[(node, engine, name)] = shape
            placed.append(
                Candidate(
                    node,
                    pending,
                    reserved,
                    shape[0],
                    shape[1],
                    self.pressure.pressure(node, now_wall),
                    self.speeds.pace(node, name, now),
                    node == affinity,
                )
            )
        return placed

    def choose(self, policy: PlacementPolicy, candidates: Sequence[Candidate], model: str) -> int:
        """The index in ``candidates`` of the node the policy picks."""
        if policy == "round_robin":
            ids = sorted(c.node for c in candidates)
            chosen = ids[self._turn % len(ids)]
            self._turn += 1
        elif policy == "reference":
            chosen = reference.pick(candidates)
        else:
            answer = self.speeds.answer_tokens(model) or pair.DEFAULT_ANSWER_TOKENS
            chosen = pair.pick(candidates, answer)
        return next(i for i, c in enumerate(candidates) if c.node == chosen)

    def expected_wait(self, candidates: Sequence[Candidate], index: int, model: str) -> float:
        """Seconds the request is expected to wait on ``candidates[index]`` before it starts
        (for a slot, plus a load where the model is not resident), by ``pair``'s estimate."""
        answer = self.speeds.answer_tokens(model) or pair.DEFAULT_ANSWER_TOKENS
        chosen = pair.estimates(candidates, answer)[index]
        return chosen.wait_s + chosen.load_s

    def sampling(self, node: NodeId, model: str) -> bool:
        """Whether a dispatch to ``node`` now is one to learn from: none was for ``model``
        (normalized) in the last ``SAMPLE_EVERY_S`` (this one then counts as sampled)."""
        now = self._clock.monotonic()
        last = self._sampled.get((node, model))
        if last is not None and now - last < SAMPLE_EVERY_S:
            return False
        self._sampled[(node, model)] = now
        return True

    def placed(self, candidate: Candidate, engine: str, model: str) -> Placed:
        """A record of this dispatch, to learn from its outcome."""
        return Placed(candidate, engine, normalize(engine, model), self._clock.monotonic())

    def first_byte(self, placed: Placed) -> None:
        """The dispatch committed: its time to the first byte, if it had a free slot."""
        if not placed.free_slot:
            return
        now = self._clock.monotonic()
        self.speeds.first_byte(
            placed.candidate.node,
            placed.model,
            now - placed.dispatched_at,
            cold=placed.candidate.resident is False,
            now=now,
        )

    def completed(self, placed: Placed, meter: OutputMeter) -> None:
        """The dispatch's response completed: what it generated, how fast."""
        figures = meter.generation()
        if figures is None:
            return
        tokens, seconds = figures
        self.speeds.generated(
            placed.candidate.node, placed.model, tokens, seconds, self._clock.monotonic()
        )


def slots_for(target: RouteTarget, engine: str, model: str) -> int:
    """How many requests for ``model`` the target's engine runs at once."""
    for name, count in target.model_slots.items():
        if same_model(engine, name, model):
            return max(1, count)
    return max(1, target.slots)


def resident(target: RouteTarget, engine: str, model: str) -> bool | None:
    """Whether the target holds ``model`` now (None: it did not say)."""
    if not target.resident_known:
        return None
    return any(same_model(engine, name, model) for name in target.resident)
