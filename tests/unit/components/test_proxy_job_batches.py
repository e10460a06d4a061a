"""The broker's side of ``proxy/jobs``: a batch's events reach the job list one by one, in
order; a batch that is not one is dropped with an error, and loses nothing else."""

from __future__ import annotations

import logging
from typing import Any

import msgspec
import pytest

from backend.components.identity.certificate import mint
from backend.components.proxy.component import ProxyComponent
from backend.protocol.proxy import ProxyTargets
from backend.protocol.types.base import NodeId
from backend.protocol.types.broker import Ports
from backend.protocol.types.jobs import JobEvent, JobEvents
from backend.protocol.worker_methods import PROXY_JOBS
from tests.fakes import FakeClock, RecordingErrors


def _component(received: list[Any]) -> ProxyComponent:
    return ProxyComponent(
        ports=Ports(node=1, ollama=2, openai=3, llamacpp=4, relay=5),  # never opened here
        errors=RecordingErrors(),
        clock=FakeClock(),
        targets=ProxyTargets,
        credentials=mint(NodeId("node-a")),
        on_job=received.append,
    )


def _event(seq: int, kind: str) -> JobEvent:
    return JobEvent(
        key="node-a/r1/1",
        seq=seq,
        kind=kind,  # type: ignore[arg-type]
        attempt=1,
        at=1.0,
        engine="ollama",
        model="m",
        origin=NodeId("node-a"),
        run_id="r1",
        created_at=1.0,
    )


def _wire(batch: JobEvents) -> Any:
    """The parameters as the broker's channel decodes them."""
    return msgspec.json.decode(msgspec.json.encode(batch))


def test_a_batch_reaches_the_job_list_event_by_event_in_order() -> None:
    received: list[Any] = []
    component = _component(received)
    batch = JobEvents(events=[_event(1, "submitted"), _event(2, "started"), _event(3, "completed")])
    component._notification(PROXY_JOBS.name, _wire(batch))
    assert [(event["seq"], event["kind"]) for event in received] == [
        (1, "submitted"),
        (2, "started"),
        (3, "completed"),
    ]


@pytest.mark.parametrize("params", [None, [], "events", {"events": {"seq": 1}}, {"other": []}])
def test_a_batch_that_is_no_list_of_events_is_dropped_with_an_error(
    params: Any, caplog: pytest.LogCaptureFixture
) -> None:
    received: list[Any] = []
    component = _component(received)
    with caplog.at_level(logging.ERROR):
        component._notification(PROXY_JOBS.name, params)
    assert received == []
    assert "malformed batch of job events" in caplog.text
    # The next good batch is applied as usual.
    component._notification(PROXY_JOBS.name, _wire(JobEvents(events=[_event(1, "submitted")])))
    assert [event["kind"] for event in received] == ["submitted"]
