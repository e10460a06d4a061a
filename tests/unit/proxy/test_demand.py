"""The demand meter (``routing/demand.py``) and what placement feeds it (``routing/choice.py``).

Plain values and a fake clock: counts, the longest wait and its reuse within 100 ms, queues
falling as requests commit, local use, and silence while nothing changes.
"""

from __future__ import annotations

import asyncio

import pytest

from backend.protocol.proxy import LocalUse, ModelDemand, ProxyTargets, RouteTarget
from backend.workers.proxy.routing.admission import Admission
from backend.workers.proxy.routing.choice import NodeChoice
from backend.workers.proxy.routing.demand import ESTIMATE_EVERY_S, Demand, digest_of
from backend.workers.proxy.routing.placement import pair
from backend.workers.proxy.routing.placement.inputs import Candidate, Pace
from tests.fakes import FakeClock

DIGEST = "sha256:" + "ab" * 32
# One request ahead of a busy single-slot node waits for the whole queue: first token plus the
# default answer at the default speed, per job ahead.
SERVICE_S = pair.DEFAULT_FIRST_TOKEN_S + pair.DEFAULT_ANSWER_TOKENS / pair.DEFAULT_TOKENS_PER_S


def target(node: str, *, digests: dict[str, str] | None = None) -> RouteTarget:
    return RouteTarget(
        node_id=node,
        kind="engine",
        base_url=f"http://{node}",
        engine="ollama",
        models=["m:latest"],
        digests=digests or {},
    )


_generations = iter(range(1, 1_000_000))


def table(*targets: RouteTarget, loads: dict[str, int] | None = None) -> ProxyTargets:
    """A table newer than the last (its load snapshot is taken)."""
    return ProxyTargets(
        node_id="a",
        engines={"ollama": list(targets)},
        loads=loads or {},
        generation=next(_generations),
    )


def test_requests_are_counted_per_model_with_owners_and_digest() -> None:
    demand = Demand()
    routes = table(target("b", digests={"m:latest": DIGEST}), target("a"))
    found = routes.engines["ollama"]
    for _ in range(3):
        demand.admitted("m", routes, found)
    demand.admitted("other", routes, [])

    report = demand.report(at=50.0)

    assert report is not None and report.at == 50.0
    assert report.models == [
        ModelDemand(model="m", digest=DIGEST, requests=3, queued=3, owners=["a", "b"]),
        ModelDemand(model="other", requests=1, queued=1),
    ]


def test_nothing_is_reported_while_idle() -> None:
    demand = Demand()
    assert demand.report(at=1.0) is None
    routes = table(target("a"))
    demand.admitted("m", routes, routes.engines["ollama"])
    demand.committed("m")
    assert demand.report(at=2.0) is not None
    assert demand.report(at=3.0) is None, "nothing changed since the last report"


async def test_the_reporter_may_wait_for_the_next_change_instead_of_a_timer() -> None:
    demand = Demand()
    routes = table(target("a"))
    demand.admitted("m", routes, routes.engines["ollama"])
    await asyncio.wait_for(demand.until_changed(), 1)  # changed already: at once
    assert demand.report(at=1.0) is not None
    waiting = asyncio.ensure_future(demand.until_changed())
    await asyncio.sleep(0.01)
    assert not waiting.done()  # nothing changed since the report
    demand.committed("m")
    await asyncio.wait_for(waiting, 1)
    assert demand.report(at=2.0) is not None


def test_queued_falls_as_requests_commit_and_requests_start_again_each_period() -> None:
    demand = Demand()
    routes = table(target("a"))
    for _ in range(3):
        demand.admitted("m", routes, routes.engines["ollama"])
    demand.committed("m")
    first = demand.report(at=1.0)
    demand.committed("m")
    second = demand.report(at=2.0)
    demand.committed("m")
    demand.committed("m")  # one more than admitted: never below nothing
    third = demand.report(at=3.0)

    assert first is not None and second is not None and third is not None
    assert [(d.requests, d.queued) for d in first.models] == [(3, 2)]
    assert [(d.requests, d.queued) for d in second.models] == [(0, 1)]
    assert third.models == [], "a model with nothing asked and nothing waiting is left out"
    assert demand.queued("m") == 0


def test_the_longest_wait_of_a_period_is_reported() -> None:
    demand = Demand()
    routes = table(target("a"))
    demand.admitted("m", routes, routes.engines["ollama"])
    demand.waited("m", 2.0, now=0.0)
    demand.waited("m", 7.5, now=1.0)
    demand.waited("m", 1.0, now=2.0)
    first = demand.report(at=3.0)
    demand.waited("m", 0.5, now=4.0)
    second = demand.report(at=5.0)

    assert first is not None and [d.wait_s for d in first.models] == [7.5]
    assert second is not None and [d.wait_s for d in second.models] == [0.5]


def test_local_use_counts_what_runs_and_keeps_the_last_commit_time() -> None:
    demand = Demand()
    demand.local_started("ollama", "m:latest", at=100.0)
    demand.local_started("ollama", "m:latest", at=101.0)
    demand.local_started("llamacpp", "q", at=90.0)
    demand.local_ended("llamacpp", "q")
    first = demand.report(at=102.0)
    demand.local_ended("ollama", "m:latest")
    second = demand.report(at=103.0)

    assert first is not None and first.models == []
    assert first.local == [
        LocalUse(engine="llamacpp", model="q", last_used_at=90.0, active=0),
        LocalUse(engine="ollama", model="m:latest", last_used_at=101.0, active=2),
    ]
    assert second is not None
    assert second.local[1] == LocalUse(
        engine="ollama", model="m:latest", last_used_at=101.0, active=1
    ), "every local model is listed each time, changed or not"


def test_the_digest_is_found_under_the_targets_spelling_of_the_name() -> None:
    owner = target("a", digests={"M:latest": DIGEST})
    assert digest_of("m", [target("b"), owner]) == DIGEST
    assert digest_of("n", [owner]) is None


def _admission(model: str = "m", *, origin: str | None = None) -> Admission:
    admission = Admission(door="ollama", model=model, body=b"{}", path="/api/chat")
    admission.origin = origin  # type: ignore[assignment]
    return admission


def _place(choice: NodeChoice, routes: ProxyTargets, admission: Admission) -> None:
    _, generation, _ = choice.reserve(admission, routes.engines["ollama"])
    choice.release("a", generation)


def test_a_single_owners_wait_is_estimated_and_reused_for_a_tenth_of_a_second() -> None:
    clock = FakeClock(start=0.0)
    choice = NodeChoice(clock, affinity=False)
    busy, idle = table(target("a"), loads={"a": 3}), table(target("a"))
    choice.demand.admitted("m", busy, busy.engines["ollama"])  # waits throughout
    choice.table_changed(busy)
    _place(choice, busy, _admission())  # three ahead of one slot
    first = choice.demand.report(at=1.0)
    choice.table_changed(idle)
    clock.now = ESTIMATE_EVERY_S / 2
    _place(choice, idle, _admission())  # the figure of a moment ago is reused
    second = choice.demand.report(at=2.0)
    clock.now = ESTIMATE_EVERY_S * 1.5
    less_busy = table(target("a"), loads={"a": 2})
    choice.table_changed(less_busy)
    _place(choice, less_busy, _admission())  # worked out afresh: two ahead
    third = choice.demand.report(at=3.0)

    assert first is not None and [d.wait_s for d in first.models] == [round(3 * SERVICE_S, 3)]
    assert second is not None and [d.wait_s for d in second.models] == [round(3 * SERVICE_S, 3)]
    assert third is not None and [d.wait_s for d in third.models] == [round(2 * SERVICE_S, 3)]


def test_the_wait_is_the_chosen_nodes_among_several() -> None:
    choice = NodeChoice(FakeClock(start=0.0), affinity=False)
    routes = table(target("a"), target("b"), loads={"a": 3, "b": 2})
    choice.table_changed(routes)
    choice.demand.admitted("m", routes, routes.engines["ollama"])

    chosen, generation, _ = choice.reserve(_admission(), routes.engines["ollama"])
    choice.release(chosen.node_id, generation)
    report = choice.demand.report(at=1.0)

    assert chosen.node_id == "b"
    assert report is not None and [d.wait_s for d in report.models] == [round(2 * SERVICE_S, 3)]


def test_the_expected_wait_adds_the_load_of_a_model_not_resident() -> None:
    placer = NodeChoice(FakeClock(start=0.0), affinity=False).placer
    measured = Pace(tokens_per_s=40.0, first_token_s=0.5, load_s=4.0)
    cold = Candidate("a", slots=2, resident=False, pace=measured)
    warm_busy = Candidate("b", pending=2, slots=1, resident=True, pace=measured)

    assert placer.expected_wait([cold, warm_busy], 0, "m") == 4.0
    service = 0.5 + pair.DEFAULT_ANSWER_TOKENS / 40.0
    assert placer.expected_wait([cold, warm_busy], 1, "m") == pytest.approx(2 * service)


def test_a_members_request_is_placed_without_counting_as_demand_here() -> None:
    choice = NodeChoice(FakeClock(start=0.0), affinity=False)
    routes = table(target("a"))
    choice.table_changed(routes)
    _place(choice, routes, _admission(origin="b"))
    assert choice.demand.report(at=1.0) is None
