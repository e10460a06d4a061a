"""The broker's side of ``proxy:demand``: each report goes to the callback, the local engines'
last use is kept (across a worker's restart too), a malformed report is dropped."""

from __future__ import annotations

import logging
from typing import Any

import msgspec
import pytest

from backend.components.identity.certificate import mint
from backend.components.proxy.component import ProxyComponent
from backend.components.proxy.demand import DemandInbox
from backend.protocol.proxy import DemandReport, LocalUse, ModelDemand, ProxyTargets
from backend.protocol.types.base import NodeId
from backend.protocol.types.broker import Ports
from backend.protocol.worker_methods import PROXY_DEMAND
from tests.fakes import FakeClock, RecordingErrors

USED = LocalUse(engine="ollama", model="m:latest", last_used_at=100.0, active=2)
REPORT = DemandReport(
    at=101.0,
    models=[ModelDemand(model="m", requests=3, wait_s=1.5, queued=1, owners=["node-a"])],
    local=[USED],
)


def _component(received: list[DemandReport]) -> ProxyComponent:
    return ProxyComponent(
        ports=Ports(node=1, ollama=2, openai=3, llamacpp=4, relay=5),  # never opened here
        errors=RecordingErrors(),
        clock=FakeClock(),
        targets=ProxyTargets,
        credentials=mint(NodeId("node-a")),
        on_demand=received.append,
    )


def _wire(report: DemandReport) -> Any:
    """The parameters as the broker's channel decodes them."""
    return msgspec.json.decode(msgspec.json.encode(report))


def test_a_report_reaches_the_callback_and_its_local_use_is_kept() -> None:
    received: list[DemandReport] = []
    component = _component(received)
    assert component.last_local_use() == []

    component._notification(PROXY_DEMAND.name, _wire(REPORT))

    assert received == [REPORT]
    assert component.last_local_use() == [USED]


def test_a_malformed_report_is_dropped_with_an_error(caplog: pytest.LogCaptureFixture) -> None:
    received: list[DemandReport] = []
    component = _component(received)
    with caplog.at_level(logging.ERROR):
        component._notification(PROXY_DEMAND.name, {"models": "many"})
    assert received == [] and component.last_local_use() == []
    assert "malformed demand report" in caplog.text


def test_without_a_callback_the_local_use_is_still_kept() -> None:
    inbox = DemandInbox()
    inbox.received(_wire(REPORT))
    assert inbox.last_local_use() == [USED]


def test_a_later_report_replaces_what_it_lists_and_keeps_the_rest_idle() -> None:
    inbox = DemandInbox()
    inbox.received(_wire(REPORT))
    other = LocalUse(engine="llamacpp", model="q", last_used_at=200.0, active=1)
    inbox.received(_wire(DemandReport(at=201.0, local=[other])))  # a restarted worker's

    assert inbox.last_local_use() == [
        other,
        LocalUse(engine="ollama", model="m:latest", last_used_at=100.0, active=0),
    ]


def test_a_gone_worker_runs_nothing_any_more() -> None:
    inbox = DemandInbox()
    inbox.received(_wire(REPORT))
    inbox.worker_gone()
    assert inbox.last_local_use() == [msgspec.structs.replace(USED, active=0)]
