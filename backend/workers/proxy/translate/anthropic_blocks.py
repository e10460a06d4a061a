"""Anthropic ``system`` and ``messages`` content blocks as OpenAI chat messages.

Text and images map to content parts, ``tool_use`` to an assistant's ``tool_calls`` and
``tool_result`` to ``tool`` messages. Past ``thinking`` blocks are dropped, as Anthropic does
with the thinking of earlier turns. Block types for Anthropic's server-side features are
refused by name.
"""

from __future__ import annotations

import msgspec

from backend.workers.proxy.translate.base import Malformed, Unhonoured

_ROLES = frozenset({"user", "assistant", "system"})
_BLOCK_KEYS: dict[str, frozenset[str]] = {
    "text": frozenset({"type", "text", "cache_control", "citations"}),
    "image": frozenset({"type", "source", "cache_control"}),
    "tool_use": frozenset({"type", "id", "name", "input", "cache_control"}),
    "tool_result": frozenset({"type", "tool_use_id", "content", "is_error", "cache_control"}),
    "thinking": frozenset({"type", "thinking", "signature"}),
    "redacted_thinking": frozenset({"type", "data"}),
}
_TEXT_ONLY = frozenset({"text"})
_USER_BLOCKS = frozenset({"text", "image", "tool_result"})
_ASSISTANT_BLOCKS = frozenset({"text", "tool_use", "thinking", "redacted_thinking"})
# Anthropic block types that need its servers (documents, server tools, containers).
_SERVER_BLOCKS = frozenset(
    {"document", "search_result", "server_tool_use", "web_search_tool_result",
     "web_fetch_tool_result", "code_execution_tool_result", "bash_code_execution_tool_result",
     "text_editor_code_execution_tool_result", "tool_search_tool_result", "container_upload",
     "mcp_tool_use", "mcp_tool_result", "tool_reference"}
)  # fmt: skip
_TOOL_ERROR_PREFIX = "Error: "


def system_text(value: object, ignored: list[str]) -> str:
    """The system prompt (a string or text blocks) as one string."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise Malformed("system: must be a string or a list of text blocks")
    return "\n".join(_text(f"system[{index}]", block, ignored) for index, block in enumerate(value))


def message_list(value: object, ignored: list[str]) -> list[dict[str, object]]:
    """The OpenAI messages for Anthropic's ``messages`` (one turn may become several)."""
    if not isinstance(value, list):
        raise Malformed("messages: must be a list")
    out: list[dict[str, object]] = []
    for index, message in enumerate(value):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise Malformed(f"{where}: must be an object")
        role, content = message.get("role"), message.get("content")
        if role not in _ROLES:
            raise Malformed(f"{where}.role: must be user or assistant")
        for key in message:
            if key not in ("role", "content"):
                raise Unhonoured(f"{where}.{key}", "not supported by this engine")
        if isinstance(content, str):
            out.append({"role": role, "content": content})
        elif not isinstance(content, list):
            raise Malformed(f"{where}.content: must be a string or a list of blocks")
        elif role == "assistant":
            out.append(_assistant(where, content, ignored))
        elif role == "user":
            out.extend(_user(where, content, ignored))
        else:
            out.append({"role": role, "content": system_text_in(where, content, ignored)})
    return out


def system_text_in(where: str, blocks: list[object], ignored: list[str]) -> str:
    """A system turn's text blocks as one string."""
    return "\n".join(
        _text(f"{where}.content[{index}]", block, ignored) for index, block in enumerate(blocks)
    )


def json_text(arguments: object) -> dict[str, object]:
    """A tool call's arguments (a JSON string, or already an object) as an object."""
    if isinstance(arguments, dict):
        return arguments
    if not isinstance(arguments, str) or not arguments.strip():
        return {}
    try:
        value = msgspec.json.decode(arguments)
    except msgspec.DecodeError:
        value = None
    # Anthropic's input is always an object: arguments that are not one are kept, named.
    return value if isinstance(value, dict) else {"arguments": arguments}


def _block_type(
    where: str, block: object, allowed: frozenset[str]
) -> tuple[str, dict[str, object]]:
    if not isinstance(block, dict):
        raise Malformed(f"{where}: must be an object")
    kind = block.get("type")
    if isinstance(kind, str) and kind in _SERVER_BLOCKS:
        raise Unhonoured(f"{where}.type", f"{kind} blocks are not supported by this engine")
    if not isinstance(kind, str) or kind not in allowed:
        raise Malformed(f"{where}.type: {kind!r} is not a valid block here")
    for key in block:
        if key not in _BLOCK_KEYS[kind]:
            raise Unhonoured(f"{where}.{key}", "not supported by this engine")
    return kind, block


def _text(where: str, block: object, ignored: list[str]) -> str:
    _, checked = _block_type(where, block, _TEXT_ONLY)
    return _text_value(where, checked, ignored)


def _text_value(where: str, block: dict[str, object], ignored: list[str]) -> str:
    text = block.get("text")
    if not isinstance(text, str):
        raise Malformed(f"{where}.text: must be a string")
    if block.get("citations"):
        raise Unhonoured(f"{where}.citations", "not supported by this engine")
    if "cache_control" in block and "cache_control" not in ignored:
        ignored.append("cache_control")
    return text


def _user(where: str, blocks: list[object], ignored: list[str]) -> list[dict[str, object]]:
    """Tool results first (OpenAI wants them right after the assistant's calls), then parts."""
    tools: list[dict[str, object]] = []
    parts: list[dict[str, object]] = []
    for index, raw in enumerate(blocks):
        here = f"{where}.content[{index}]"
        kind, block = _block_type(here, raw, _USER_BLOCKS)
        if "cache_control" in block and "cache_control" not in ignored:
            ignored.append("cache_control")
        if kind == "text":
            parts.append({"type": "text", "text": _text_value(here, block, ignored)})
        elif kind == "image":
            parts.append(_image(here, block))
        else:
            tools.append(_tool_result(here, block, ignored))
    if len(parts) == 1 and parts[0]["type"] == "text":
        return [*tools, {"role": "user", "content": parts[0]["text"]}]
    return [*tools, {"role": "user", "content": parts}] if parts else tools


def _image(where: str, block: dict[str, object]) -> dict[str, object]:
    source = block.get("source")
    if not isinstance(source, dict):
        raise Malformed(f"{where}.source: must be an object")
    kind = source.get("type")
    if kind == "base64":
        media_type, data = source.get("media_type"), source.get("data")
        if not isinstance(media_type, str) or not isinstance(data, str):
            raise Malformed(f"{where}.source: base64 needs media_type and data strings")
        url = f"data:{media_type};base64,{data}"
    elif kind == "url" and isinstance(source.get("url"), str):
        url = str(source["url"])
    elif kind == "url":
        raise Malformed(f"{where}.source.url: must be a string")
    else:
        raise Unhonoured(f"{where}.source.type", f"{kind!r} images are not supported")
    return {"type": "image_url", "image_url": {"url": url}}


def _tool_result(where: str, block: dict[str, object], ignored: list[str]) -> dict[str, object]:
    tool_use_id = block.get("tool_use_id")
    if not isinstance(tool_use_id, str):
        raise Malformed(f"{where}.tool_use_id: must be a string")
    content = block.get("content", "")
    if isinstance(content, list):
        for index, item in enumerate(content):
            if isinstance(item, dict) and item.get("type") == "image":
                # OpenAI tool messages carry text only.
                raise Unhonoured(f"{where}.content[{index}]", "images in tool results")
        text = "\n".join(
            _text(f"{where}.content[{index}]", item, ignored) for index, item in enumerate(content)
        )
    elif isinstance(content, str):
        text = content
    else:
        raise Malformed(f"{where}.content: must be a string or a list of blocks")
    if block.get("is_error") is True:
        text = _TOOL_ERROR_PREFIX + text
    return {"role": "tool", "tool_call_id": tool_use_id, "content": text}


def _assistant(where: str, blocks: list[object], ignored: list[str]) -> dict[str, object]:
    texts: list[str] = []
    calls: list[dict[str, object]] = []
    for index, raw in enumerate(blocks):
        here = f"{where}.content[{index}]"
        kind, block = _block_type(here, raw, _ASSISTANT_BLOCKS)
        if kind == "text":
            texts.append(_text_value(here, block, ignored))
        elif kind == "tool_use":
            calls.append(_tool_call(here, block))
        # thinking and redacted_thinking: past turns' thinking is not shown to the model again.
    message: dict[str, object] = {"role": "assistant", "content": "\n".join(texts)}
    if calls:
        message["tool_calls"] = calls
    return message


def _tool_call(where: str, block: dict[str, object]) -> dict[str, object]:
    call_id, name, arguments = block.get("id"), block.get("name"), block.get("input")
    if not isinstance(call_id, str) or not isinstance(name, str) or not isinstance(arguments, dict):
        raise Malformed(f"{where}: tool_use needs string id and name and an input object")
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": msgspec.json.encode(arguments).decode()},
    }
