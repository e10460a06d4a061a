"""The engine's OpenAI answer to one Ollama request, turned back into Ollama's: NDJSON records
from the SSE stream as it arrives, or one body for a non-streamed answer."""

from __future__ import annotations

import time
from collections.abc import Callable

import msgspec

from backend.workers.proxy.translate.ollama_replies import (
    ENCODER,
    Answer,
    AnswerChoice,
    AnswerMessage,
    Endpoint,
    EngineAnswerInvalid,
    Timings,
    Usage,
    created_at,
    done_reason,
    metrics,
    thinking_of,
    tool_call_record,
    whole_answer,
)

_ANSWER_DECODER = msgspec.json.Decoder(Answer)


class _PendingCall:
    """A streamed tool call whose arguments are still arriving."""

    __slots__ = ("arguments", "call_id", "name")

    def __init__(self) -> None:
        self.call_id: str | None = None
        self.name = ""
        self.arguments: list[str] = []


class OllamaReply:
    """Translates the answer to one Ollama request (a ``ReplyTranslator``).

    ``model`` is the name the client asked for (Ollama echoes it); ``started_ns`` is when the
    request was translated, the start of ``total_duration`` where the engine sends no timings.
    """

    stream_content_type: str = "application/x-ndjson"

    __slots__ = (
        "_calls",
        "_closed",
        "_endpoint",
        "_finish_reason",
        "_model",
        "_now_ns",
        "_partial",
        "_started_ns",
        "_timings",
        "_usage",
    )

    def __init__(
        self,
        endpoint: Endpoint,
        model: str,
        started_ns: int,
        now_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        self._endpoint = endpoint
        self._model = model
        self._started_ns = started_ns
        self._now_ns = now_ns
        self._partial = bytearray()
        self._closed = False
        self._calls: dict[int, _PendingCall] = {}
        self._finish_reason: str | None = None
        self._usage: Usage | None = None
        self._timings: Timings | None = None

    def whole(self, body: bytes) -> bytes:
        """The Ollama body for a non-streamed answer; ``EngineAnswerInvalid`` if unreadable."""
        return whole_answer(self._endpoint, self._model, body, self._started_ns, self._now_ns())

    def error_record(self, message: str) -> bytes:
        """Ollama's last line of a stream that failed."""
        return ENCODER.encode({"error": message}) + b"\n"

    def chunk(self, data: bytes) -> bytes:
        """NDJSON lines for the SSE lines ``data`` completes; only the unfinished line is kept."""
        if self._closed:
            return b""
        end = data.find(b"\n")
        if end < 0:
            self._partial += data
            return b""
        out: list[bytes] = []
        start = 0
        while end >= 0 and not self._closed:
            if self._partial:
                self._partial += data[start:end]
                line = bytes(self._partial)
                self._partial.clear()
            else:
                line = data[start:end]
            self._on_line(line, out)
            start = end + 1
            end = data.find(b"\n", start)
        if not self._closed:
            self._partial += data[start:]
        return b"".join(out)

    def _on_line(self, line: bytes, out: list[bytes]) -> None:
        # Every OpenAI engine writes one JSON record per ``data:`` line, so a line is
        # handled when it ends rather than waiting for the blank line that closes the event.
        if not line.startswith(b"data:"):
            return  # blank lines, ``:`` comments (keep-alives), ``event:``/``id:`` fields
        payload = line[5:].strip()
        if payload == b"[DONE]":
            self._on_done(out)
            return
        try:
            answer = _ANSWER_DECODER.decode(payload)
        except msgspec.MsgspecError:
            self._fail("the engine sent a stream record that is not an OpenAI chunk", out)
            return
        if answer.error is not None:
            self._fail(_error_message(answer.error), out)
            return
        if answer.usage is not None:
            self._usage = answer.usage
        if answer.timings is not None:
            self._timings = answer.timings
        if answer.choices:
            self._on_choice(answer.choices[0], out)

    def _on_choice(self, choice: AnswerChoice, out: list[bytes]) -> None:
        delta = choice.delta or AnswerMessage(content=choice.text)
        if delta.tool_calls:
            self._collect(delta)
        thinking = thinking_of(delta)
        logprobs = choice.logprobs.content if choice.logprobs is not None else None
        if delta.content or thinking or logprobs:
            out.append(self._text_record(delta.content or "", thinking, logprobs))
        if choice.finish_reason is not None:
            self._finish_reason = choice.finish_reason
            self._flush_calls(out)

    def _collect(self, delta: AnswerMessage) -> None:
        for piece in delta.tool_calls or ():
            call = self._calls.get(piece.index)
            if call is None:
                call = self._calls[piece.index] = _PendingCall()
            if piece.id:
                call.call_id = piece.id
            if piece.function is not None:
                call.name += piece.function.name or ""
                if piece.function.arguments:
                    call.arguments.append(piece.function.arguments)

    def _flush_calls(self, out: list[bytes]) -> None:
        if not self._calls:
            return
        try:
            calls = [
                tool_call_record(call.call_id, call.name, "".join(call.arguments))
                for _, call in sorted(self._calls.items())
            ]
        except EngineAnswerInvalid as error:
            self._fail(str(error), out)
            return
        self._calls.clear()
        message = {"role": "assistant", "content": "", "tool_calls": calls}
        out.append(self._encode({**self._head(), "message": message, "done": False}))

    def _on_done(self, out: list[bytes]) -> None:
        self._flush_calls(out)
        if self._closed:
            return
        now = self._now_ns()
        record = self._head(now)
        if self._endpoint == "chat":
            record["message"] = {"role": "assistant", "content": ""}
        else:
            record["response"] = ""
        record["done"] = True
        record["done_reason"] = done_reason(self._finish_reason)
        record.update(metrics(self._usage, self._timings, self._started_ns, now))
        out.append(self._encode(record))
        self._closed = True

    def _text_record(
        self, content: str, thinking: str | None, logprobs: list[msgspec.Raw] | None
    ) -> bytes:
        record = self._head()
        if self._endpoint == "chat":
            message = {"role": "assistant", "content": content}
            if thinking:
                message["thinking"] = thinking
            record["message"] = message
        else:
            record["response"] = content
            if thinking:
                record["thinking"] = thinking
        if logprobs:
            record["logprobs"] = logprobs
        record["done"] = False
        return self._encode(record)

    def _head(self, now: int | None = None) -> dict[str, object]:
        stamp = created_at(self._now_ns() if now is None else now)
        return {"model": self._model, "created_at": stamp}

    def _fail(self, message: str, out: list[bytes]) -> None:
        out.append(self.error_record(message))
        self._closed = True
        self._partial.clear()

    @staticmethod
    def _encode(record: dict[str, object]) -> bytes:
        return ENCODER.encode(record) + b"\n"


def _error_message(error: dict[str, object] | str) -> str:
    if isinstance(error, str):
        return error
    message = error.get("message")
    return message if isinstance(message, str) else ENCODER.encode(error).decode()
