"""The Playground's pure parts (the request in each API's shape, the snippets, the stream
decoders, the figures, the model list) and the page on a scripted cluster and door."""

from __future__ import annotations

import ast
import json
import shlex
import subprocess
from collections.abc import AsyncIterator
from typing import Any

import pytest
from PySide6.QtGui import QGuiApplication
from pytestqt.qtbot import QtBot

from app.controllers.playground import computer_name, door_for, model_choices, result_lines
from app.controllers.playground_snippets import curl_command, python_program
from app.controllers.playground_stream import ChatResult
from app.controllers.playground_wire import (
    ApiName,
    ChatRequest,
    StreamDecoder,
    chat_body,
    error_message,
)
from app.window.playground_page import PlaygroundPage, parse_stop
from backend.protocol.types.base import EngineName, NodeId
from backend.protocol.types.engines import EngineModels, MemberEngines
from tests.gui.helpers import wait_until
from tests.gui.playground_rig import LAPTOP_ID, Rig, ScriptedDoor, start_rig

DOOR = "http://127.0.0.1:41000"
TRICKY = 'it\'s "quoted", $HOME `date` \\ and\nnew lines'


def request(api: ApiName, **changes: Any) -> ChatRequest:
    fields: dict[str, Any] = {
        "api": api, "door_url": DOOR, "model": "llama3.2", "user": TRICKY, "system": "be brief",
        "temperature": 0.5, "max_tokens": 64, "stop": ("\n\n", "END"),
    }  # fmt: skip
    fields.update(changes)
    return ChatRequest(**fields)


# The request and its snippets.


def test_each_api_gets_its_own_body_shape() -> None:
    openai = chat_body(request("openai"))
    assert openai["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": TRICKY},
    ]
    assert (openai["max_tokens"], openai["stop"], openai["stream"]) == (64, ["\n\n", "END"], True)
    ollama = chat_body(request("ollama"))
    assert ollama["options"] == {"temperature": 0.5, "num_predict": 64, "stop": ["\n\n", "END"]}
    anthropic = chat_body(request("anthropic", max_tokens=None))
    assert anthropic["system"] == "be brief" and anthropic["max_tokens"] == 1024
    assert anthropic["messages"] == [{"role": "user", "content": TRICKY}]
    assert anthropic["stop_sequences"] == ["\n\n", "END"]


@pytest.mark.parametrize("api", ["openai", "ollama", "anthropic"])
def test_the_curl_command_is_valid_shell_for_the_exact_request(api: ApiName) -> None:
    chat = request(api)
    command = curl_command(chat)
    # A shell drops each backslash-newline, then splits the words as shlex does.
    argv = shlex.split(command.replace("\\\n", ""))
    assert argv[:3] == ["curl", "-N", chat.door_url + {"openai": "/v1/chat/completions",
        "ollama": "/api/chat", "anthropic": "/v1/messages"}[api]]  # fmt: skip
    assert json.loads(argv[argv.index("-d") + 1]) == chat_body(chat)
    headers = [argv[i + 1] for i, word in enumerate(argv) if word == "-H"]
    assert "Content-Type: application/json" in headers
    assert ("anthropic-version: 2023-06-01" in headers) == (api == "anthropic")
    # And bash itself hands curl the same words.
    printed = subprocess.run(
        ["bash", "-c", "printf '%s\\0' " + command.removeprefix("curl ")],
        capture_output=True,
        check=True,
    ).stdout.decode()
    assert printed.split("\0")[:-1] == argv[1:]


def _call_keywords(program: str) -> dict[str, Any]:
    """The keyword arguments of the program's request call, as Python values."""
    tree = ast.parse(program)
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and node.keywords]
    request_call = max(calls, key=lambda call: len(call.keywords))
    return {kw.arg: ast.literal_eval(kw.value) for kw in request_call.keywords if kw.arg}


def test_the_python_programs_send_the_same_request_with_each_sdk() -> None:
    openai = python_program(request("openai"))
    assert "from openai import OpenAI" in openai and f'base_url="{DOOR}/v1"' in openai
    sent = _call_keywords(openai)
    body = chat_body(request("openai"))
    assert {k: sent[k] for k in body} == body
    ollama = python_program(request("ollama"))
    assert "from ollama import Client" in ollama and f'host="{DOOR}"' in ollama
    sent = _call_keywords(ollama)
    assert sent["options"] == chat_body(request("ollama"))["options"] and sent["stream"] is True
    anthropic = python_program(request("anthropic"))
    assert "import anthropic" in anthropic and f'base_url="{DOOR}"' in anthropic
    sent = _call_keywords(anthropic)
    body = chat_body(request("anthropic"))
    assert sent["extra_body"] == {"temperature": 0.5}
    assert {k: sent[k] for k in ("model", "max_tokens", "system", "messages")} == {
        k: body[k] for k in ("model", "max_tokens", "system", "messages")
    }


# Reading the answer.


def _feed(api: ApiName, *lines: str) -> list[tuple[str, int | None, str | None]]:
    decoder = StreamDecoder(api)
    pieces = [decoder.feed(line.encode()) for line in lines]
    return [(p.text, p.tokens, p.error) for p in pieces if p is not None]


def test_the_decoders_read_text_token_counts_and_errors_of_each_api() -> None:
    assert _feed(
        "openai",
        'data: {"choices": [{"delta": {"content": "Hi"}}]}',
        "",
        'data: {"choices": [], "usage": {"completion_tokens": 7}}',
        "data: [DONE]",
    ) == [("Hi", None, None), ("", 7, None)]
    assert _feed(
        "ollama",
        '{"message": {"content": "Hi"}, "done": false}',
        '{"message": {"content": ""}, "done": true, "eval_count": 5}',
        '{"error": "model unloaded"}',
    ) == [("Hi", None, None), ("", 5, None), ("", None, "model unloaded")]
    assert _feed(
        "anthropic",
        "event: message_start",
        'data: {"type": "message_start", "message": {"usage": {"output_tokens": 1}}}',
        'data: {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "Hi"}}',
        'data: {"type": "message_delta", "usage": {"output_tokens": 3}}',
        'data: {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}',
    ) == [("", None, None), ("Hi", None, None), ("", 3, None), ("", None, "busy")]


def test_a_doors_refusal_reads_as_its_own_message() -> None:
    openai = b'{"error": {"message": "The model `x` does not exist", "type": "not_found_error"}}'
    assert error_message(404, openai) == "The model `x` does not exist (HTTP 404)"
    assert error_message(404, b'{"error": "model \'x\' not found"}') == (
        "model 'x' not found (HTTP 404)"
    )
    assert error_message(502, b"Bad Gateway") == "Bad Gateway (HTTP 502)"
    assert error_message(500, b"") == "The door answered HTTP 500."


def test_the_figures_use_the_engines_count_else_the_records() -> None:
    counted = ChatResult(served_by="n", first_token_s=0.5, total_s=2.5, chunks=9, engine_tokens=21)
    assert counted.tokens_per_s == pytest.approx(10.0)  # 20 tokens after the first, in 2 s
    assert result_lines(counted, "laptop") == [
        "Served by laptop", "first token 0.50 s", "10.0 tokens/s", "21 tokens in 2.50 s"
    ]  # fmt: skip
    records = ChatResult(first_token_s=1.0, total_s=2.0, chunks=5)
    assert records.tokens == 5 and records.tokens_per_s == pytest.approx(4.0)
    assert "4.0 tokens/s (counted records)" in result_lines(records, "x")
    assert ChatResult(first_token_s=1.0, total_s=1.0, chunks=1).tokens_per_s is None
    assert result_lines(ChatResult(total_s=0.1, error="refused"), "x") == []


def test_the_picker_lists_every_model_once_with_its_computers() -> None:
    local = EngineModels(
        models=["a", "b"], by_engine={EngineName("ollama"): ["b", "a"]}, loaded_by_engine={},
        slots_by_engine={},
    )  # fmt: skip
    laptop = MemberEngines(node_id=NodeId("n2"), name="laptop", reachable=True, models=local)
    away = MemberEngines(node_id=NodeId("n3"), name="away", reachable=False, models=local)
    choices = model_choices(local, [laptop, away])
    assert [(c.name, c.computers) for c in choices] == [
        ("a", ("this computer", "laptop")),
        ("b", ("this computer", "laptop")),
    ]
    assert choices[0].label == "a  (this computer, laptop)"
    assert computer_name("n2", "n1", [laptop]) == "laptop"
    assert computer_name("n1", "n1", [laptop]) == "this computer"
    assert door_for({"openai": "http://0.0.0.0:1234"}) == "http://127.0.0.1:1234"
    assert door_for({}) is None


def test_stop_sequences_are_comma_separated_with_escaped_line_breaks() -> None:
    assert parse_stop(" END, \\n\\n ,, ###") == ("END", "\n\n", "###")
    assert parse_stop("") == ()


# The page on a scripted cluster.


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    door = ScriptedDoor(served_by={"phi4:14b": LAPTOP_ID})
    door.refuse["gone:1b"] = (503, {"error": {"message": "no computer has gone:1b now"}})
    started = await start_rig(door)
    yield started
    await started.close()


async def test_the_page_sends_the_picked_model_and_names_the_member_that_served(
    rig: Rig, qtbot: QtBot
) -> None:
    page = PlaygroundPage(rig.playground, rig.check)
    qtbot.addWidget(page)
    combo = page.form.model_combo
    labels = [combo.itemText(i) for i in range(combo.count())]
    assert "phi4:14b  (laptop)" in labels and "llama3.2:3b  (this computer, laptop)" in labels
    combo.setCurrentIndex(combo.findData("phi4:14b"))
    assert "phi4:14b" in page.snippets.curl.toPlainText()
    page.form.send_button.click()
    await wait_until(lambda: "tokens/s" in page.answer.figures.text(), 10, "the figures")
    assert page.answer.text.toPlainText() == "Packets find their way home."
    assert page.answer.figures.text().startswith("Served by laptop · first token")
    assert "5 tokens in" in page.answer.figures.text()  # the door's usage record
    assert rig.door.received == ["phi4:14b"] and page.answer.error.text() == ""
    page.snippets.copy_curl_button.click()
    assert QGuiApplication.clipboard().text() == page.snippets.curl.toPlainText()
    assert page.snippets.curl.toPlainText().startswith(f"curl -N {rig.playground.door_url}/v1/")


async def test_a_new_send_replaces_the_answer_on_its_way(rig: Rig, qtbot: QtBot) -> None:
    rig.door.word_delay = 0.05
    page = PlaygroundPage(rig.playground, rig.check)
    qtbot.addWidget(page)
    page.send()
    await wait_until(lambda: page.answer.text.toPlainText() != "", 10, "the first words")
    page.send()
    await wait_until(lambda: page.answer.text.toPlainText() != "", 10, "the second's words")
    # The first answer's stop is not shown over the second one on its way.
    assert page.form.stop_button.isEnabled() and page.answer.error.text() == ""
    await wait_until(lambda: "tokens/s" in page.answer.figures.text(), 10, "the second answer")
    assert page.answer.text.toPlainText() == "Packets find their way home."  # not mixed
    assert len(rig.door.received) == 2


async def test_the_page_shows_a_refusal_in_plain_words(rig: Rig, qtbot: QtBot) -> None:
    page = PlaygroundPage(rig.playground, rig.check)
    qtbot.addWidget(page)
    door = rig.playground.door_url
    assert door is not None
    rig.playground.send(ChatRequest(api="openai", door_url=door, model="gone:1b", user="hi"))
    await wait_until(lambda: page.answer.error.text() != "", 10, "the error")
    assert page.answer.error.text() == "no computer has gone:1b now (HTTP 503)"
    assert not page.form.stop_button.isEnabled()
