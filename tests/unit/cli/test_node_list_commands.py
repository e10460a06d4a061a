"""``pair node add``: the address may carry its port (``10.0.0.5:14320``, ``[fe80::1]:9000``);
the broker is sent the host and the port apart, and a bad address or port is refused before it
is asked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from backend.cli import exit_codes
from backend.cli.main import main
from backend.protocol import methods
from backend.protocol.types.base import ManualNodeId
from backend.protocol.types.nodes import ManualNode
from tests.unit.cli.scripted import StreamingBroker


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch) -> StreamingBroker:
    broker = StreamingBroker()
    broker.attach(monkeypatch)
    added = ManualNode(
        id=ManualNodeId("manual:10.0.0.5:14320"),
        address="10.0.0.5",
        port=14320,
        added_at=0.0,
        state="probing",
    )
    broker.answer(methods.NODE_ADD.name, added)
    return broker


def _added(broker: StreamingBroker) -> list[tuple[str, int]]:
    return [
        (params["address"], params["port"])
        for method, params in broker.calls
        if method == methods.NODE_ADD.name
    ]


@pytest.mark.parametrize(
    ("argv", "host", "port"),
    [
        (["10.0.0.5:14320"], "10.0.0.5", 14320),
        (["10.0.0.5"], "10.0.0.5", 14320),
        (["10.0.0.5:9000"], "10.0.0.5", 9000),
        (["10.0.0.5", "--port", "9000"], "10.0.0.5", 9000),
        (["10.0.0.5:9000", "--port", "9000"], "10.0.0.5", 9000),
        (["gpu-box.local:15000"], "gpu-box.local", 15000),
        (["fe80::1"], "fe80::1", 14320),
        (["[fe80::1]:9000"], "fe80::1", 9000),
        (["[fd7a::5]", "--port", "11434"], "fd7a::5", 11434),
    ],
)
def test_the_address_may_carry_its_port(
    broker: StreamingBroker,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    host: str,
    port: int,
) -> None:
    assert main(["node", "add", *argv]) == exit_codes.OK
    assert _added(broker) == [(host, port)]
    assert "added manual:10.0.0.5:14320" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["10.0.0.5:0"], "port must be 1-65535"),
        (["10.0.0.5:99999"], "port must be 1-65535"),
        (["host:"], "type the port after :"),
        (["[::1"], "close the IPv6 address with ]"),
        (["a b"], "no spaces in an address"),
        (["http://x"], "type only the address, without http:// or a path"),
        ([""], "type an IP address or a host name"),
        (["fd7a::5:14320"], "IPv6 with a port needs brackets: [addr]:port"),
        (["10.0.0.5:9000", "--port", "9001"], "10.0.0.5:9000 says port 9000 but --port says 9001"),
    ],
)
def test_a_bad_address_exits_2_before_the_broker_is_asked(
    broker: StreamingBroker, capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    assert main(["node", "add", *argv]) == exit_codes.USAGE
    assert broker.connections == 0
    assert f"pair node add: {says}" in capsys.readouterr().err


@pytest.mark.parametrize("port", ["0", "65536", "x"])
def test_a_port_option_out_of_range_is_a_usage_error(
    broker: StreamingBroker, capsys: pytest.CaptureFixture[str], port: str
) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["node", "add", "10.0.0.5", "--port", port])
    assert caught.value.code == exit_codes.USAGE
    assert "port must be 1-65535" in capsys.readouterr().err
    assert broker.connections == 0


def test_without_a_broker_a_bad_address_still_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # No broker runs for tmp_path: reaching for one would exit 4, not 2.
    code = main(["node", "add", "10.0.0.5:14320:14320", "--data-dir", str(tmp_path)])
    assert code == exit_codes.USAGE
    assert "not an address" in capsys.readouterr().err


def test_the_name_goes_with_the_address(broker: StreamingBroker) -> None:
    assert main(["node", "add", "10.0.0.5:14320", "--name", "gpu box"]) == exit_codes.OK
    params: dict[str, Any] = broker.calls[-1][1]
    assert params == {"address": "10.0.0.5", "port": 14320, "name": "gpu box"}
