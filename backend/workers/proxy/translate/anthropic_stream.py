"""An engine's streamed OpenAI answer, turned into Anthropic's Messages event stream.

Each engine SSE record (``data: <chunk>``) becomes zero or more Anthropic events
(``event: <type>\\ndata: <json>\\n\\n``): ``message_start`` on the first record, one content
block per run of thinking, text or one tool call, and ``message_delta`` + ``message_stop``
only on the engine's own ``data: [DONE]``. Only the unfinished line is kept between chunks.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

_encode = msgspec.json.encode
_decode = msgspec.json.decode

# OpenAI finish reasons as Anthropic stop reasons; anything else reads as a natural end.
STOP_REASONS: dict[str, str] = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}
_END_TURN = "end_turn"
_THINKING = -2
_TEXT = -1
_NO_BLOCK = -3

_DELTA_HEAD = b'event: content_block_delta\ndata: {"type":"content_block_delta","index":'
_TEXT_DELTA = b',"delta":{"type":"text_delta","text":'
_THINKING_DELTA = b',"delta":{"type":"thinking_delta","thinking":'
_JSON_DELTA = b',"delta":{"type":"input_json_delta","partial_json":'
_DELTA_TAIL = b"}}\n\n"


def event(kind: str, payload: dict[str, object]) -> bytes:
    """One Anthropic SSE event: ``payload`` gets ``"type": kind`` first."""
    return b"event: %s\ndata: %s\n\n" % (kind.encode(), _encode({"type": kind, **payload}))


def error_event(message: str) -> bytes:
    """Anthropic's in-stream error event (the stream's last record)."""
    return event("error", {"error": {"type": "api_error", "message": message}})


def stop_reason(choice: dict[str, object], used_tools: bool) -> tuple[str, str | None]:
    """Anthropic's ``stop_reason`` and ``stop_sequence`` for an OpenAI choice."""
    finish = choice.get("finish_reason")
    reason = STOP_REASONS.get(finish, _END_TURN) if isinstance(finish, str) else _END_TURN
    if reason == _END_TURN and used_tools:
        # Anthropic clients loop on "tool_use"; some engines say "stop" after a tool call.
        return "tool_use", None
    matched = choice.get("stop_reason")  # vLLM-style engines name the stop string that ended it
    if reason == _END_TURN and isinstance(matched, str):
        return "stop_sequence", matched
    return reason, None


def message_id(engine_id: object, now_ns: Callable[[], int]) -> str:
    """``msg_`` + the engine's answer id (its ``chatcmpl-`` prefix dropped), or a fresh one."""
    if isinstance(engine_id, str) and engine_id:
        return "msg_" + engine_id.removeprefix("chatcmpl-")
    return f"msg_{now_ns():x}"


def usage_counts(usage: object) -> tuple[int, int]:
    """``(input_tokens, output_tokens)`` from an OpenAI ``usage`` object (0 where absent)."""
    if not isinstance(usage, dict):
        return 0, 0
    prompt = usage.get("prompt_tokens")
    completion = usage.get("completion_tokens")
    return (prompt if isinstance(prompt, int) else 0), (
        completion if isinstance(completion, int) else 0
    )


class AnthropicEventStream:
    """Turns one engine's OpenAI SSE stream into Anthropic's event stream, chunk by chunk."""

    stream_content_type = "text/event-stream"

    def __init__(self, model: str, now_ns: Callable[[], int]) -> None:
        self._model = model
        self._now_ns = now_ns
        self._partial = b""
        self._started = False
        self._finished = False
        self._block = _NO_BLOCK  # _THINKING, _TEXT or the open tool call's OpenAI index
        self._blocks = 0
        self._used_tools = False
        self._call_id = ""
        self._last_choice: dict[str, object] = {}
        self._usage: object = None

    def chunk(self, data: bytes) -> bytes:
        """The Anthropic events for the engine records ``data`` completes."""
        if self._finished:
            return b""
        lines = (self._partial + data if self._partial else data).split(b"\n")
        self._partial = lines.pop()
        out: list[bytes] = []
        for line in lines:
            # Nothing follows the engine's end or an error (the loop checks, _record sets it).
            if line.startswith(b"data:") and not self._finished:
                out.append(self._record(line[5:].strip()))
        return b"".join(out)

    def error_record(self, message: str) -> bytes:
        """The error event that ends a cut stream."""
        self._finished = True
        return error_event(message)

    def _record(self, payload: bytes) -> bytes:
        if payload == b"[DONE]":
            return self._start() + self._finish()
        try:
            record = _decode(payload)
        except msgspec.DecodeError:
            return self.error_record("the engine sent an unreadable stream record")
        if not isinstance(record, dict):
            return b""
        if "error" in record:
            return self.error_record(_error_message(record["error"]))
        head = b"" if self._started else self._start(record.get("id"))
        usage = record.get("usage")
        if usage is not None:
            self._usage = usage
        choices = record.get("choices")
        if not choices or not isinstance(choices, list):
            return head
        choice = choices[0]
        if not isinstance(choice, dict):
            return head
        if choice.get("finish_reason") is not None:
            self._last_choice = choice
        delta = choice.get("delta")
        return head + self._delta(delta) if isinstance(delta, dict) else head

    def _start(self, engine_id: object = None) -> bytes:
        if self._started:
            return b""
        self._started = True
        message: dict[str, object] = {
            "id": message_id(engine_id, self._now_ns),
            "type": "message",
            "role": "assistant",
            "model": self._model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        return event("message_start", {"message": message})

    def _delta(self, delta: dict[str, object]) -> bytes:
        out = b""
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            out += self._open(_THINKING, {"type": "thinking", "thinking": "", "signature": ""})
            out += _DELTA_HEAD + b"%d" % (self._blocks - 1) + _THINKING_DELTA
            out += _encode(reasoning) + _DELTA_TAIL
        content = delta.get("content")
        if isinstance(content, str) and content:
            out += self._open(_TEXT, {"type": "text", "text": ""})
            out += _DELTA_HEAD + b"%d" % (self._blocks - 1) + _TEXT_DELTA
            out += _encode(content) + _DELTA_TAIL
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            for call in calls:
                if isinstance(call, dict):
                    out += self._tool_call(call)
        return out

    def _tool_call(self, call: dict[str, object]) -> bytes:
        index, call_id = call.get("index"), call.get("id")
        position = index if isinstance(index, int) and index >= 0 else 0
        function = call.get("function")
        function = function if isinstance(function, dict) else {}
        out = b""
        # A new id starts a new call even at the same index (engines that send no index).
        if position == self._block and isinstance(call_id, str) and call_id != self._call_id:
            out = self._close()
        if position != self._block:
            name = function.get("name")
            self._call_id = call_id if isinstance(call_id, str) and call_id else self._tool_id()
            block: dict[str, object] = {
                "type": "tool_use",
                "id": self._call_id,
                "name": name if isinstance(name, str) else "",
                "input": {},
            }
            out += self._open(position, block)
            self._used_tools = True
        arguments = function.get("arguments")
        if isinstance(arguments, dict):  # an engine that sends the whole call as an object
            arguments = _encode(arguments).decode()
        if isinstance(arguments, str) and arguments:
            out += _DELTA_HEAD + b"%d" % (self._blocks - 1) + _JSON_DELTA
            out += _encode(arguments) + _DELTA_TAIL
        return out

    def _tool_id(self) -> str:
        return f"toolu_{self._now_ns():x}_{self._blocks}"

    def _open(self, kind: int, block: dict[str, object]) -> bytes:
        """Starts a content block of ``kind`` unless it is the open one, closing that first."""
        if kind == self._block:
            return b""
        out = self._close()
        self._block = kind
        self._blocks += 1
        return out + event(
            "content_block_start", {"index": self._blocks - 1, "content_block": block}
        )

    def _close(self) -> bytes:
        if self._block == _NO_BLOCK:
            return b""
        self._block = _NO_BLOCK
        return event("content_block_stop", {"index": self._blocks - 1})

    def _finish(self) -> bytes:
        self._finished = True
        reason, sequence = stop_reason(self._last_choice, self._used_tools)
        input_tokens, output_tokens = usage_counts(self._usage)
        delta = {"stop_reason": reason, "stop_sequence": sequence}
        usage = {"output_tokens": output_tokens, "input_tokens": input_tokens}
        return (
            self._close()
            + event("message_delta", {"delta": delta, "usage": usage})
            + event("message_stop", {})
        )


def _error_message(error: object) -> str:
    if isinstance(error, dict):
        message = error.get("message")
        if isinstance(message, str):
            return message
    return error if isinstance(error, str) else "the engine reported an error"
