"""Which candidate a request goes to: placement fed the reservations and conversation affinity."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Container, Sequence

from backend.core.clock import Clock
from backend.protocol.proxy import ProxyTargets, RouteTarget
from backend.workers.proxy.routing.admission import Admission
from backend.workers.proxy.routing.candidates import (
    AFFINITY_CREDIT,
    NodeId,
    NodeLoad,
    Reservations,
    pending_and_held,
    released,
    reserved,
    with_snapshot,
)
from backend.workers.proxy.routing.demand import Demand
from backend.workers.proxy.routing.naming import normalize
from backend.workers.proxy.routing.placement.inputs import Candidate
from backend.workers.proxy.routing.placement.pair import DEFAULT_ANSWER_TOKENS
from backend.workers.proxy.routing.placement.placer import Placed, Placer

AFFINITY_CAPACITY = 10_000


class NodeChoice:
    """The table's placement policy (docs/PLACEMENT.md) over the candidates of each request,
    fed the reservations that spread bursts and the node that served each conversation last;
    ``placer`` learns each node's pace from the dispatches it samples. The reservations are a
    frozen value, replaced by each reserve, release and snapshot. Each placement of a request
    from this node's doors also tells ``demand`` how long it is expected to wait there."""

    def __init__(self, clock: Clock, *, affinity: bool, demand: Demand | None = None) -> None:
        self.placer = Placer(clock)
        self.demand = demand if demand is not None else Demand()
        self._clock = clock
        self._reservations = Reservations()
        self._affinity = Affinity()
        self._use_affinity = affinity
        self._targets = ProxyTargets()
        # Told when a moved request is placed where its move sent it (``rebalance.Waiting``).
        self.on_steered: Callable[[str], None] = lambda node: None

    def table_changed(self, targets: ProxyTargets) -> None:
        """Adopt a new table and the load snapshot it carries."""
        self._targets = targets
        loads = {node: NodeLoad(pending=count) for node, count in targets.loads.items()}
        self._reservations = with_snapshot(self._reservations, targets.generation, loads)
        self.placer.table_changed(targets)

    def reserve(
        self, admission: Admission, found: list[RouteTarget]
    ) -> tuple[RouteTarget, int, Placed | None]:
        """Place the request among ``found`` (a pin goes first) and reserve the chosen node.

        Returns the node, the reservation's generation (for ``release``) and the placement,
        only when a dispatch is to learn from it (``Placer.sampling``)."""
        engine = found[0].engine
        model = normalize(engine, admission.model)
        placer = self.placer
        placing: list[Candidate] | None = None
        index = 0
        steer, admission.steer = admission.steer, None
        if steer is not None:  # a request moving here from this node's queue
            index = next((i for i, t in enumerate(found) if t.node_id == steer), 0)
            self.on_steered(steer)
        elif placement_chooses(found, self._targets.pins.get(engine)):
            placing = self._inputs(admission, found, affinity=self._use_affinity)
            index = placer.choose(self._targets.placement, placing, model)
        chosen = found[index]
        placed = None
        if placer.sampling(chosen.node_id, model):
            # With nothing to choose, the node's inputs are gathered only to learn from it.
            if placing is None:
                placing, index = self._inputs(admission, [chosen], affinity=False), 0
            placed = placer.placed(placing[index], engine, admission.model)
        if admission.origin is None:
            self._expect_wait(admission, chosen, placing, index, model)
        table = self._reservations
        self._reservations = reserved(table, chosen.node_id)
        return chosen, table.generation, placed

    def release(self, node: str, generation: int) -> None:
        """The attempt at ``node`` ended: give its reservation back."""
        self._reservations = released(self._reservations, node, generation)

    def served(self, session: str | None, node: str) -> None:
        """``node`` committed a response for the conversation ``session``."""
        self._affinity.served(session, node)

    def _expect_wait(
        self,
        admission: Admission,
        chosen: RouteTarget,
        placing: list[Candidate] | None,
        index: int,
        model: str,
    ) -> None:
        """Tell the demand meter the wait expected on ``chosen``: worked out afresh at most
        every ``demand.ESTIMATE_EVERY_S`` per model (from the inputs placement already has,
        else the chosen node's alone), the last figure in between."""
        demand, now = self.demand, self._clock.monotonic()
        if demand.reused_wait(admission.model, now):
            return
        if placing is None:
            placing, index = self._inputs(admission, [chosen], affinity=False), 0
        demand.waited(admission.model, self.placer.expected_wait(placing, index, model), now)

    def inputs(self, admission: Admission, targets: list[RouteTarget]) -> list[Candidate]:
        """What placement knows of each of ``targets`` for ``admission`` now, without its
        conversation's affinity (for weighing a waiting request again)."""
        return self._inputs(admission, targets, affinity=False)

    def answer_tokens(self, model: str) -> float:
        """The mean answer length placement plans ``model``'s requests with."""
        return self.placer.speeds.answer_tokens(model) or DEFAULT_ANSWER_TOKENS

    def _inputs(
        self, admission: Admission, targets: list[RouteTarget], *, affinity: bool
    ) -> list[Candidate]:
        """What placement knows of each of ``targets`` for this request."""
        reservations = self._reservations
        return self.placer.candidates(
            targets[0].engine,
            admission.model,
            targets,
            loads=lambda node: pending_and_held(reservations, node),
            affinity=self._affinity.node_for(admission.session) if affinity else None,
        )


def placement_chooses(found: Sequence[RouteTarget], pin: str | None) -> bool:
    """Whether placement picks among ``found``: more than one, and no pin leading them."""
    return len(found) > 1 and found[0].node_id != pin


class Affinity:
    """Which node served each conversation last (bounded, oldest forgotten first).

    Its term in placement (``placement.pair``): that node's expected completion counts
    ``AFFINITY_CREDIT`` times its time to first token less, so the next turn of a chat goes
    back to the node whose engine holds its KV unless another finishes it clearly sooner (not
    a hard pin). ``credit`` is the same term in jobs, for ``least_loaded``.
    """

    def __init__(self, capacity: int = AFFINITY_CAPACITY) -> None:
        self._capacity = capacity
        self._last: OrderedDict[str, NodeId] = OrderedDict()

    def served(self, session: str | None, node: NodeId) -> None:
        """``node`` committed a response for ``session``."""
        if session is None:
            return
        self._last[session] = node
        self._last.move_to_end(session)
        while len(self._last) > self._capacity:
            self._last.popitem(last=False)

    def node_for(self, session: str | None) -> NodeId | None:
        """The node that served ``session`` last, if remembered."""
        return self._last.get(session) if session is not None else None

    def credit(self, session: str | None, candidates: Container[NodeId]) -> dict[NodeId, float]:
        """The affinity term for ``session`` among ``candidates``."""
        node = self.node_for(session)
        return {node: AFFINITY_CREDIT} if node is not None and node in candidates else {}
