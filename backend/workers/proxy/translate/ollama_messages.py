"""Ollama chat messages, images and tool definitions as OpenAI's."""

from __future__ import annotations

import binascii

import msgspec

from backend.workers.proxy.translate.base import Malformed, Unhonoured


class ToolCallFunction(msgspec.Struct):
    """The function of an Ollama tool call: arguments are an object."""

    name: str
    arguments: dict[str, object] = {}


class ToolCall(msgspec.Struct):
    """A tool call in an Ollama assistant message."""

    function: ToolCallFunction
    id: str | None = None


class Message(msgspec.Struct):
    """One Ollama chat message."""

    role: str
    content: str | None = None
    images: list[str] | None = None
    thinking: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None


class ToolFunction(msgspec.Struct):
    """The function of a tool definition (only its shape is checked; it passes as sent)."""

    name: str
    description: str | None = None
    parameters: dict[str, object] | None = None


class Tool(msgspec.Struct):
    """A tool definition: Ollama's are OpenAI's already."""

    function: ToolFunction
    type: str | None = None


_ROLES = ("system", "user", "assistant", "tool")

# Magic numbers of the image formats vision models take, on the first decoded bytes.
_IMAGE_MAGIC = (
    (b"\x89PNG", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF8", "image/gif"),
)


def openai_messages(messages: list[Message]) -> list[dict[str, object]]:
    """The OpenAI messages for Ollama's (tool results get the id of the call they answer)."""
    out: list[dict[str, object]] = []
    calls: list[tuple[str, str]] = []  # (name, id) of every assistant tool call so far
    for index, message in enumerate(messages):
        role = message.role
        if role not in _ROLES:
            raise Unhonoured(f"messages[{index}].role", f"{role!r} is not one of {_ROLES}")
        if message.tool_calls and role != "assistant":
            raise Unhonoured(f"messages[{index}].tool_calls", "only assistant messages call tools")
        if role == "user":
            where = f"messages[{index}].images"
            out.append(user_message(message.content or "", message.images, where))
            continue
        if message.images:
            raise Unhonoured(f"messages[{index}].images", f"OpenAI {role} messages take no images")
        if role == "assistant":
            out.append(_assistant(message, calls))
        elif role == "tool":
            out.append(_tool_result(message, calls))
        else:
            out.append({"role": role, "content": message.content or ""})
    return out


def user_message(content: str, images: list[str] | None, field: str) -> dict[str, object]:
    """A user message: a string, or text and image parts when it carries ``images`` (named
    ``field`` in the client's request)."""
    if not images:
        return {"role": "user", "content": content}
    parts: list[dict[str, object]] = [{"type": "text", "text": content}] if content else []
    for number, image in enumerate(images):
        url = image_url(image, f"{field}[{number}]")
        parts.append({"type": "image_url", "image_url": {"url": url}})
    return {"role": "user", "content": parts}


def image_url(image: str, where: str) -> str:
    """A data URL for a base64 image, its type read from its first bytes (PNG by default)."""
    if image.startswith("data:"):
        return image
    head = image[:16]
    try:
        magic = binascii.a2b_base64(head + "=" * (-len(head) % 4), strict_mode=True)
    except binascii.Error as error:
        raise Malformed(f"{where}: not base64 ({error})") from error
    return f"data:{_image_type(magic)};base64,{image}"


def _image_type(magic: bytes) -> str:
    for prefix, mime in _IMAGE_MAGIC:
        if magic.startswith(prefix):
            return mime
    if magic[:4] == b"RIFF" and magic[8:12] == b"WEBP":
        return "image/webp"
    return "image/png"


def _assistant(message: Message, calls: list[tuple[str, str]]) -> dict[str, object]:
    out: dict[str, object] = {"role": "assistant", "content": message.content or ""}
    if message.thinking:
        # llama-server reads earlier reasoning back under this name for templates that use it.
        out["reasoning_content"] = message.thinking
    if message.tool_calls:
        out["tool_calls"] = [_tool_call(call, calls) for call in message.tool_calls]
    return out


def _tool_call(call: ToolCall, calls: list[tuple[str, str]]) -> dict[str, object]:
    call_id = call.id or f"call_{len(calls)}"
    calls.append((call.function.name, call_id))
    arguments = msgspec.json.encode(call.function.arguments).decode()
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": call.function.name, "arguments": arguments},
    }


def _tool_result(message: Message, calls: list[tuple[str, str]]) -> dict[str, object]:
    out: dict[str, object] = {"role": "tool", "content": message.content or ""}
    call_id = message.tool_call_id or _answered_call(message.tool_name, calls)
    if call_id:
        out["tool_call_id"] = call_id
    if message.tool_name:
        out["name"] = message.tool_name
    return out


def _answered_call(tool_name: str | None, calls: list[tuple[str, str]]) -> str | None:
    """The id of the latest call of ``tool_name``, else of the latest call of any tool."""
    for name, call_id in reversed(calls):
        if name == tool_name:
            return call_id
    return calls[-1][1] if calls else None


def checked_tools(tools: list[msgspec.Raw]) -> list[object]:
    """The tool definitions as sent, once each is known to be a function definition (one
    without a ``type``, which Ollama accepts, gets OpenAI's required ``"function"``)."""
    out: list[object] = []
    for index, raw in enumerate(tools):
        try:
            tool = msgspec.json.decode(raw, type=Tool)
        except msgspec.ValidationError as error:
            raise Malformed(f"tools[{index}]: {error}") from error
        if tool.type is None:
            out.append({"type": "function", **msgspec.json.decode(raw)})
        elif tool.type == "function":
            out.append(raw)
        else:
            raise Unhonoured(f"tools[{index}].type", "OpenAI engines take only function tools")
    return out
