"""``pair endpoints``: every door reaches every model, one client setting per API, the doors'
ports and moved-port notes; ``--json`` prints the door → URL map for scripts."""

from __future__ import annotations

import json

import msgspec
import pytest

from backend.cli import main
from backend.cli.client_commands import format_status
from backend.cli.endpoints_command import EVERY_MODEL, format_endpoints
from backend.protocol import methods
from backend.protocol.types.base import NodeId
from backend.protocol.types.broker import BrokerStatus, ServiceError
from tests.unit.cli.scripted import StreamingBroker, broker_status

DOORS = {
    "llamacpp": "http://127.0.0.1:8080",
    "ollama": "http://127.0.0.1:11434",
    "openai": "http://127.0.0.1:1234",
}
MOVED = ServiceError(
    id="proxy:port-taken:openai",
    node_id=NodeId("n"),
    message="Port 1234 is used by another program; PAIR serves this door on port 41873.",
    created_at=1.0,
    updated_at=1.0,
)


def status(doors: dict[str, str], errors: list[ServiceError] | None = None) -> BrokerStatus:
    return msgspec.structs.replace(broker_status(), front_doors=doors, errors=errors or [])


def line_of(text: str, start: str) -> list[str]:
    """The columns of the one line that starts with ``start``."""
    [line] = [line for line in text.splitlines() if line.startswith(start)]
    return line.removeprefix(start).split()


def test_every_door_reaches_every_model_and_each_api_has_one_client_setting() -> None:
    text = format_endpoints(status(DOORS))
    assert text.splitlines()[0] == EVERY_MODEL
    assert line_of(text, "Ollama API") == ["http://127.0.0.1:11434", "OLLAMA_HOST=127.0.0.1:11434"]
    # The SDKs refuse to start without a key; this computer needs none, so any value does.
    assert line_of(text, "OpenAI API") == [
        "http://127.0.0.1:1234/v1", "OPENAI_BASE_URL=http://127.0.0.1:1234/v1",
        "OPENAI_API_KEY=pair",
    ]  # fmt: skip
    # Without /v1: the anthropic SDK adds /v1/messages itself.
    assert line_of(text, "Anthropic API") == [
        "http://127.0.0.1:11434", "ANTHROPIC_BASE_URL=http://127.0.0.1:11434",
        "ANTHROPIC_API_KEY=pair",
    ]  # fmt: skip
    assert "LM Studio's models" not in text and "llama-server's models" not in text


def test_the_doors_are_listed_in_order_with_the_usual_port_they_take() -> None:
    text = format_endpoints(status(DOORS))
    lines = [line.split()[:3] for line in text.splitlines()]
    assert [line for line in lines if line[:1] in (["ollama"], ["openai"], ["llamacpp"])] == [
        ["ollama", "http://127.0.0.1:11434", "Ollama"],
        ["openai", "http://127.0.0.1:1234", "LM"],
        ["llamacpp", "http://127.0.0.1:8080", "llama-server"],
    ]
    assert "note:" not in text


def test_the_node_api_is_https_at_the_addresses_other_computers_use() -> None:
    text = format_endpoints(status(DOORS), ["192.168.1.30", "100.64.0.7"])
    assert " ".join(line_of(text, "node API")) == (
        "https://192.168.1.30:14320/v1/node-info, https://100.64.0.7:14320/v1/node-info "
        "(other PAIR nodes: pairing and node-info)"
    )
    alone = " ".join(line_of(format_endpoints(status(DOORS)), "node API"))
    assert alone == "port 14320 over TLS (this computer has no address other computers can use now)"
    assert "0.0.0.0" not in text and "http://0" not in text


def test_an_api_whose_door_is_closed_names_another_open_door() -> None:
    text = format_endpoints(status({"llamacpp": DOORS["llamacpp"]}))
    assert line_of(text, "Ollama API")[1] == "OLLAMA_HOST=127.0.0.1:8080"
    assert line_of(text, "OpenAI API")[1] == "OPENAI_BASE_URL=http://127.0.0.1:8080/v1"
    assert line_of(text, "Anthropic API")[1] == "ANTHROPIC_BASE_URL=http://127.0.0.1:8080"


def test_a_moved_port_is_a_note_and_no_door_open_is_one_sentence() -> None:
    moved = {**DOORS, "openai": "http://127.0.0.1:41873"}
    text = format_endpoints(status(moved, [MOVED]))
    assert f"note: {MOVED.message}" in text.splitlines()
    assert line_of(text, "OpenAI API")[0] == "http://127.0.0.1:41873/v1"
    assert (
        format_endpoints(status({})) == "The front doors are not open yet; try again in a moment."
    )


def test_json_prints_the_door_url_map(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    broker = StreamingBroker()
    broker.answer(methods.STATUS.name, status(DOORS))
    broker.attach(monkeypatch)
    assert main.main(["endpoints", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == DOORS
    assert main.main(["endpoints"]) == 0
    assert capsys.readouterr().out.startswith(EVERY_MODEL)


def test_pair_status_lists_the_doors_in_the_app_s_order() -> None:
    [line] = [line for line in format_status(status(DOORS)).splitlines() if "front doors" in line]
    assert line == (
        "front doors ollama http://127.0.0.1:11434, openai http://127.0.0.1:1234, "
        "llamacpp http://127.0.0.1:8080"
    )
