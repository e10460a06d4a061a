"""What a model file says about itself (llama.cpp's GGUF header, as the broker reads it), in
the Models page's words: the Details column and its tooltip. Plain functions, no Qt."""

from __future__ import annotations

from backend.protocol.types.engines import ModelDetails


def details_text(details: ModelDetails | None) -> str:
    """``llama · Q4_K_M · 32K context``: what is known of a model file, compactly."""
    if details is None:
        return ""
    context = details.context_length
    parts = [details.architecture, details.quantization]
    parts.append(f"{_tokens(context)} context" if context is not None else None)
    return " · ".join(part for part in parts if part)


def details_tip(details: ModelDetails | None) -> str | None:
    """The same, one fact a line, with the file's name and the exact context length."""
    if details is None:
        return None
    context = details.context_length
    facts = [
        ("Architecture", details.architecture),
        ("Quantization", details.quantization),
        ("Context length", f"{context:,} tokens" if context is not None else None),
        ("File", details.file),
    ]
    lines = [f"{name}: {value}" for name, value in facts if value]
    return "\n".join(lines) or None


def _tokens(count: int) -> str:
    """A context length as people write it: 32768 is ``32K``; an odd one stays exact."""
    if count >= 1024 and count % 1024 == 0:
        return f"{count // 1024}K"
    return f"{count:,}"
