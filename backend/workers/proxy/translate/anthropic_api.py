"""Anthropic Messages requests as OpenAI chat completions, and the engine's answers back.

A field the engine cannot honour is refused (``Unhonoured``, naming it as the client wrote
it); caching hints and service tiers, which only steer Anthropic's own servers, are listed in
``ignored``. Content blocks map in ``anthropic_blocks.py``; streamed answers in
``anthropic_stream.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import msgspec

from backend.workers.proxy.translate.anthropic_blocks import (
    json_text,
    message_list,
    system_text,
)
from backend.workers.proxy.translate.anthropic_stream import (
    AnthropicEventStream,
    message_id,
    stop_reason,
    usage_counts,
)
from backend.workers.proxy.translate.base import (
    EngineRequest,
    Malformed,
    Translation,
    Unhonoured,
)

ANTHROPIC_PATHS: tuple[str, ...] = ("/v1/messages",)
_ENGINE_PATH = "/v1/chat/completions"
_REQUIRED = ("model", "max_tokens", "messages")
# Hints for Anthropic's own servers (caching, capacity, region, speed, cache diagnostics).
_IGNORED_FIELDS = frozenset(
    {"cache_control", "service_tier", "inference_geo", "speed", "diagnostics"}
)
_TOOL_CHOICES = {"auto": "auto", "any": "required", "none": "none"}
_TOOL_KEYS = frozenset(
    {"name", "description", "input_schema", "type", "cache_control", "strict",
     "eager_input_streaming"}
)  # fmt: skip


def translate(path: str, body: bytes, *, now_ns: Callable[[], int] = time.time_ns) -> Translation:
    """The OpenAI chat request for an Anthropic ``/v1/messages`` request, and its reply."""
    if path not in ANTHROPIC_PATHS:
        raise Malformed(f"{path}: no Anthropic translation for this path")
    try:
        request = msgspec.json.decode(body)
    except msgspec.DecodeError as error:
        raise Malformed(f"request body is not valid JSON: {error}") from None
    if not isinstance(request, dict):
        raise Malformed("request body must be a JSON object")
    engine_body, ignored = engine_request(request)
    stream = engine_body.get("stream") is True
    return Translation(
        EngineRequest(_ENGINE_PATH, msgspec.json.encode(engine_body), stream, ignored),
        AnthropicReply(str(engine_body["model"]), now_ns),
    )


def engine_request(request: dict[str, object]) -> tuple[dict[str, object], tuple[str, ...]]:
    """The OpenAI chat body for a decoded Anthropic request, and the fields it ignores."""
    for name in _REQUIRED:
        if name not in request:
            raise Malformed(f"{name}: Field required")
    ignored: list[str] = []
    body: dict[str, object] = {}
    for key, value in request.items():
        if key in _IGNORED_FIELDS:
            _note(ignored, key)
        elif key in _FIELDS:
            _FIELDS[key](value, body)
        elif key not in ("system", "messages"):
            raise Unhonoured(key, "not supported by this engine")
    thinking = request.get("thinking")
    if isinstance(thinking, dict) and "budget_tokens" in thinking:
        # The engine thinks as long as its model does, within max_tokens (as Anthropic counts).
        _note(ignored, "thinking.budget_tokens")
    messages = message_list(request["messages"], ignored)
    if "system" in request:
        messages.insert(0, {"role": "system", "content": system_text(request["system"], ignored)})
    body["messages"] = messages
    return body, tuple(ignored)


def _note(ignored: list[str], name: str) -> None:
    if name not in ignored:
        ignored.append(name)


def _model(value: object, body: dict[str, object]) -> None:
    if not isinstance(value, str) or not value:
        raise Malformed("model: must be a non-empty string")
    body["model"] = value


def _max_tokens(value: object, body: dict[str, object]) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise Malformed("max_tokens: must be a non-negative integer")
    if value == 0:
        raise Unhonoured("max_tokens", "0 (prompt cache pre-warming) is not supported")
    body["max_tokens"] = value


def _sampling(
    name: str, low: float, high: float | None
) -> Callable[[object, dict[str, object]], None]:
    def apply(value: object, body: dict[str, object]) -> None:
        if value is None:
            return
        if isinstance(value, bool) or not isinstance(value, int | float) or value < low:
            raise Malformed(f"{name}: must be a number >= {low}")
        if high is not None and value > high:
            raise Malformed(f"{name}: must be a number <= {high}")
        body[name] = value

    return apply


def _stop_sequences(value: object, body: dict[str, object]) -> None:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise Malformed("stop_sequences: must be a list of strings")
    if value:
        body["stop"] = value


def _stream(value: object, body: dict[str, object]) -> None:
    if not isinstance(value, bool):
        raise Malformed("stream: must be a boolean")
    if value:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}


def _metadata(value: object, body: dict[str, object]) -> None:
    if not isinstance(value, dict):
        raise Malformed("metadata: must be an object")
    for key, item in value.items():
        if key != "user_id":
            raise Unhonoured(f"metadata.{key}", "not supported by this engine")
        if item is not None:
            if not isinstance(item, str):
                raise Malformed("metadata.user_id: must be a string")
            body["user"] = item


def _tools(value: object, body: dict[str, object]) -> None:
    if not isinstance(value, list):
        raise Malformed("tools: must be a list")
    body["tools"] = [_tool(index, tool) for index, tool in enumerate(value)]


def _tool(index: int, tool: object) -> dict[str, object]:
    where = f"tools[{index}]"
    if not isinstance(tool, dict):
        raise Malformed(f"{where}: must be an object")
    for key in tool:
        if key not in _TOOL_KEYS:
            raise Unhonoured(f"{where}.{key}", "not supported by this engine")
    if tool.get("type", "custom") not in ("custom", None):
        raise Unhonoured(f"{where}.type", "server tools run only on Anthropic's servers")
    name, schema = tool.get("name"), tool.get("input_schema")
    if not isinstance(name, str) or not isinstance(schema, dict):
        raise Malformed(f"{where}: needs a string name and an input_schema object")
    function: dict[str, object] = {"name": name, "parameters": schema}
    description = tool.get("description")
    if isinstance(description, str):
        function["description"] = description
    if tool.get("strict") is True:
        function["strict"] = True
    return {"type": "function", "function": function}


def _tool_choice(value: object, body: dict[str, object]) -> None:
    if not isinstance(value, dict):
        raise Malformed("tool_choice: must be an object")
    kind = value.get("type")
    if kind == "tool":
        name = value.get("name")
        if not isinstance(name, str):
            raise Malformed("tool_choice.name: must be a string")
        body["tool_choice"] = {"type": "function", "function": {"name": name}}
    elif isinstance(kind, str) and kind in _TOOL_CHOICES:
        body["tool_choice"] = _TOOL_CHOICES[kind]
    else:
        raise Malformed("tool_choice.type: must be one of auto, any, tool, none")
    if value.get("disable_parallel_tool_use") is True:
        body["parallel_tool_calls"] = False


def _thinking(value: object, body: dict[str, object]) -> None:
    if not isinstance(value, dict):
        raise Malformed("thinking: must be an object")
    kind = value.get("type")
    if kind == "enabled" and not _is_int(value.get("budget_tokens")):
        raise Malformed("thinking.budget_tokens: must be an integer")
    if kind not in ("enabled", "adaptive", "disabled"):
        raise Malformed("thinking.type: must be one of enabled, adaptive, disabled")
    if value.get("display") == "omitted":
        raise Unhonoured("thinking.display", "the engine always returns its thinking")
    # The engine's chat template switches thinking on or off.
    body["chat_template_kwargs"] = {"enable_thinking": kind != "disabled"}


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_FIELDS: dict[str, Callable[[object, dict[str, object]], None]] = {
    "model": _model,
    "max_tokens": _max_tokens,
    "temperature": _sampling("temperature", 0.0, 1.0),
    "top_p": _sampling("top_p", 0.0, 1.0),
    "top_k": _sampling("top_k", 0, None),
    "stop_sequences": _stop_sequences,
    "stream": _stream,
    "metadata": _metadata,
    "tools": _tools,
    "tool_choice": _tool_choice,
    "thinking": _thinking,
}


class AnthropicReply(AnthropicEventStream):
    """The engine's answer as Anthropic's: an event stream, or one Message when not streamed."""

    def whole(self, body: bytes) -> bytes:
        """The Anthropic Message for the engine's non-streamed chat completion."""
        return msgspec.json.encode(anthropic_message(body, self._model, self._now_ns))


def anthropic_message(body: bytes, model: str, now_ns: Callable[[], int]) -> dict[str, object]:
    """An OpenAI chat completion body as an Anthropic Message object."""
    completion = msgspec.json.decode(body)
    if not isinstance(completion, dict):
        completion = {}
    choices = completion.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else {}
    choice = choice if isinstance(choice, dict) else {}
    message = choice.get("message")
    content = _reply_blocks(message if isinstance(message, dict) else {})
    used_tools = any(block["type"] == "tool_use" for block in content)
    reason, sequence = stop_reason(choice, used_tools)
    input_tokens, output_tokens = usage_counts(completion.get("usage"))
    return {
        "id": message_id(completion.get("id"), now_ns),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
    }


def _reply_blocks(message: dict[str, object]) -> list[dict[str, object]]:
    blocks: list[dict[str, object]] = []
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        blocks.append({"type": "thinking", "thinking": reasoning, "signature": ""})
    text = message.get("content")
    if isinstance(text, str) and text:
        blocks.append({"type": "text", "text": text})
    calls = message.get("tool_calls")
    for number, call in enumerate(calls if isinstance(calls, list) else ()):
        if isinstance(call, dict):
            blocks.append(_tool_use(number, call))
    return blocks


def _tool_use(number: int, call: dict[str, object]) -> dict[str, object]:
    function = call.get("function")
    function = function if isinstance(function, dict) else {}
    call_id, name = call.get("id"), function.get("name")
    return {
        "type": "tool_use",
        "id": call_id if isinstance(call_id, str) and call_id else f"toolu_{number}",
        "name": name if isinstance(name, str) else "",
        "input": json_text(function.get("arguments")),
    }
