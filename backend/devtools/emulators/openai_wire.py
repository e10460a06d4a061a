"""OpenAI-compatible objects as the emulated engines write them (chunks, completions, errors).

The two engines differ in small ways, captured by ``Flavor``: Ollama writes
``system_fingerprint: "fp_ollama"``, no ``logprobs`` key and ``role`` on every content delta;
LM Studio puts the model in ``system_fingerprint`` and ``logprobs: null`` in every choice.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

ERROR_TYPES: Final = {400: "invalid_request_error", 404: "not_found_error"}


class Flavor(msgspec.Struct, frozen=True):
    """How one engine shapes its OpenAI-compatible objects."""

    fixed_fingerprint: str | None
    logprobs_key: bool
    role_on_every_chunk: bool

    def fingerprint(self, model: str) -> str:
        """``system_fingerprint`` for ``model``."""
        return self.fixed_fingerprint or model


OLLAMA: Final = Flavor(fixed_fingerprint="fp_ollama", logprobs_key=False, role_on_every_chunk=True)
LMSTUDIO: Final = Flavor(fixed_fingerprint=None, logprobs_key=True, role_on_every_chunk=False)


class Completion(msgspec.Struct, frozen=True):
    """Identity shared by every object of one response."""

    flavor: Flavor
    completion_id: str
    created: int
    model: str


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    """The ``usage`` object."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def _choice(flavor: Flavor, body: dict[str, Any], finish_reason: str | None) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, **body}
    if flavor.logprobs_key:
        choice["logprobs"] = None
    choice["finish_reason"] = finish_reason
    return choice


def _envelope(
    completion: Completion, object_type: str, choices: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "id": completion.completion_id,
        "object": object_type,
        "created": completion.created,
        "model": completion.model,
        "system_fingerprint": completion.flavor.fingerprint(completion.model),
        "choices": choices,
    }


def chat_chunk(completion: Completion, content: str, *, first: bool) -> dict[str, Any]:
    """A ``chat.completion.chunk`` carrying one piece of content."""
    delta: dict[str, Any] = {"content": content}
    if first or completion.flavor.role_on_every_chunk:
        delta = {"role": "assistant", **delta}
    choice = _choice(completion.flavor, {"delta": delta}, None)
    return _envelope(completion, "chat.completion.chunk", [choice])


def chat_finish_chunk(completion: Completion, finish_reason: str) -> dict[str, Any]:
    """The dedicated last chunk: empty delta and the finish reason."""
    choice = _choice(completion.flavor, {"delta": {}}, finish_reason)
    return _envelope(completion, "chat.completion.chunk", [choice])


def usage_chunk(completion: Completion, object_type: str, counts: dict[str, int]) -> dict[str, Any]:
    """The ``include_usage`` chunk before ``[DONE]``: no choices, a usage object."""
    return {**_envelope(completion, object_type, []), "usage": counts}


def chat_completion(
    completion: Completion, text: str, finish_reason: str, counts: dict[str, int]
) -> dict[str, Any]:
    """A non-streamed ``chat.completion``."""
    message = {"message": {"role": "assistant", "content": text}}
    choice = _choice(completion.flavor, message, finish_reason)
    return {**_envelope(completion, "chat.completion", [choice]), "usage": counts}


def text_chunk(completion: Completion, text: str, finish_reason: str | None) -> dict[str, Any]:
    """A streamed ``text_completion`` piece."""
    choice = {"text": text, **_choice(completion.flavor, {}, finish_reason)}
    return _envelope(completion, "text_completion", [choice])


def text_completion(
    completion: Completion, text: str, finish_reason: str, counts: dict[str, int]
) -> dict[str, Any]:
    """A non-streamed ``text_completion``."""
    choice = {"text": text, **_choice(completion.flavor, {}, finish_reason)}
    return {**_envelope(completion, "text_completion", [choice]), "usage": counts}


def error_body(
    message: str, status: int, *, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """``{"error": {"message", "type", "param", "code"}}`` with the type for ``status``."""
    error_type = ERROR_TYPES.get(status, "api_error")
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}
