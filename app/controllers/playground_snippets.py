"""The playground's request as a ``curl`` command and as a Python program with the API's SDK.

Both send exactly the request the playground sent (same door, path, headers and body): the
command in POSIX shell quoting, the program with ``openai``, ``ollama`` or ``anthropic``.
"""

from __future__ import annotations

import json
import shlex

from app.controllers.playground_wire import (
    ChatRequest,
    chat_body,
    chat_headers,
    chat_messages,
    chat_url,
)

UNUSED_KEY = "pair"  # the SDKs insist on a key; the door asks for none on loopback


def curl_command(request: ChatRequest) -> str:
    """The request as a ``curl`` command, one option a line (``-N``: print as it streams)."""
    parts = [f"curl -N {shlex.quote(chat_url(request))}"]
    parts += [
        f"-H {shlex.quote(f'{name}: {value}')}" for name, value in chat_headers(request).items()
    ]
    parts.append(f"-d {shlex.quote(json.dumps(chat_body(request), ensure_ascii=False))}")
    return " \\\n  ".join(parts)


def python_program(request: ChatRequest) -> str:
    """The request as a short Python program with the API's own SDK, printing the answer."""
    if request.api == "ollama":
        return _ollama_program(request)
    if request.api == "anthropic":
        return _anthropic_program(request)
    return _openai_program(request)


def _literal(value: object) -> str:
    """``value`` as a Python literal (strings, numbers, lists and dicts of them)."""
    return json.dumps(value, ensure_ascii=False)


def _arguments(pairs: list[tuple[str, object]]) -> str:
    return "".join(f"    {name}={_literal(value)},\n" for name, value in pairs)


def _openai_program(request: ChatRequest) -> str:
    pairs: list[tuple[str, object]] = [
        ("model", request.model),
        ("messages", chat_messages(request)),
    ]
    if request.temperature is not None:
        pairs.append(("temperature", request.temperature))
    if request.max_tokens is not None:
        pairs.append(("max_tokens", request.max_tokens))
    if request.stop:
        pairs.append(("stop", list(request.stop)))
    return (
        "from openai import OpenAI\n\n"
        f"client = OpenAI(base_url={_literal(request.door_url + '/v1')}, "
        f"api_key={_literal(UNUSED_KEY)})\n"
        "stream = client.chat.completions.create(\n"
        f"{_arguments(pairs)}"
        "    stream=True,\n"
        '    stream_options={"include_usage": True},\n'
        ")\n"
        "for chunk in stream:\n"
        "    if chunk.choices:\n"
        '        print(chunk.choices[0].delta.content or "", end="", flush=True)\n'
        "print()\n"
    )


def _ollama_program(request: ChatRequest) -> str:
    pairs: list[tuple[str, object]] = [
        ("model", request.model),
        ("messages", chat_messages(request)),
    ]
    options = chat_body(request).get("options")
    if options:
        pairs.append(("options", options))
    return (
        "from ollama import Client\n\n"
        f"client = Client(host={_literal(request.door_url)})\n"
        "stream = client.chat(\n"
        f"{_arguments(pairs)}"
        "    stream=True,\n"
        ")\n"
        "for part in stream:\n"
        '    print(part["message"]["content"], end="", flush=True)\n'
        "print()\n"
    )


def _anthropic_program(request: ChatRequest) -> str:
    body = chat_body(request)
    pairs: list[tuple[str, object]] = [
        ("model", request.model),
        ("max_tokens", body["max_tokens"]),
    ]
    if request.system:
        pairs.append(("system", request.system))
    pairs.append(("messages", body["messages"]))
    if request.stop:
        pairs.append(("stop_sequences", list(request.stop)))
    if request.temperature is not None:
        # Recent SDKs take no ``temperature`` argument; the Messages API still does.
        pairs.append(("extra_body", {"temperature": request.temperature}))
    return (
        "import anthropic\n\n"
        f"client = anthropic.Anthropic(base_url={_literal(request.door_url)}, "
        f"api_key={_literal(UNUSED_KEY)})\n"
        "with client.messages.stream(\n"
        f"{_arguments(pairs)}"
        ") as stream:\n"
        "    for text in stream.text_stream:\n"
        '        print(text, end="", flush=True)\n'
        "print()\n"
    )
