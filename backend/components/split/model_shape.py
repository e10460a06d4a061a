"""The layer count the planner needs, from a GGUF header (the size it needs is the file's)."""

from __future__ import annotations

from backend.common.gguf import GgufInfo


def layer_count(info: GgufInfo) -> int:
    """The model's repeating layers (``<architecture>.block_count`` in the header).

    Raises ``ValueError`` when the header does not say, since no split can be planned then.
    """
    if info.architecture is None:
        raise ValueError("the GGUF header names no architecture, so its layer count is unknown")
    key = f"{info.architecture}.block_count"
    value = info.metadata.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"the GGUF header has no layer count ({key} is missing or not positive)")
    return value
