"""How the CLI shows a model spread over members (llama.cpp's RPC backend, docs/SPLIT.md):
who holds which share, and why a degraded spread does not run as planned; plain functions of
the broker's ``SpreadStatus``."""

from __future__ import annotations

from backend.protocol.types.engines import SpreadShare, SpreadStatus

INDENT = "  "
LABEL_WIDTH = 11  # as the scheduler's lines under ``pair engines --verbose``
MEMORY = {"vram": "VRAM", "ram": "RAM"}
# What a degraded spread says when the broker gives no reason of its own.
UNKNOWN_DEGRADATION = "a member that holds a share was lost"


def describe_share(share: SpreadShare) -> str:
    """``gaming-pc 33 layers (16.5 GB VRAM, runs it)``: one member's part."""
    runs = ", runs it" if share.host else ""
    layers = f"{share.layers} layer{'s' if share.layers != 1 else ''}"
    return f"{share.name} {layers} ({_size(share.bytes)} {MEMORY[share.memory]}{runs})"


def describe_spread(spread: SpreadStatus) -> str:
    """``qwen over 2 members: gaming-pc 33 layers (…, runs it) · laptop 47 layers (…)``."""
    return f"{spread.model} {_over_members(spread)}"


def degraded_reason(spread: SpreadStatus) -> str | None:
    """Why the spread does not run as planned; None while it does."""
    if spread.state != "degraded":
        return None
    return spread.reason or UNKNOWN_DEGRADATION


def spread_lines(spread: SpreadStatus) -> list[str]:
    """The labelled lines under a table's row: the shares, then a degraded spread's reason."""
    lines = [_line("spread", describe_spread(spread))]
    reason = degraded_reason(spread)
    if reason is not None:
        lines.append(_line("degraded", reason))
    return lines


def describe_loaded_spread(spread: SpreadStatus) -> str:
    """What ``pair model load`` says after a spread load: where the model runs, and why it
    runs degraded if it does."""
    text = f"{spread.model} is spread {_over_members(spread)}"
    reason = degraded_reason(spread)
    return text if reason is None else f"{text}\nIt runs degraded: {reason}"


def _size(size: int) -> str:
    # GB as the memory figures people know; a small model's shares in MB, not "0.0 GB".
    return f"{size / 1e9:.1f} GB" if size >= 1e9 else f"{size / 1e6:.1f} MB"


def _over_members(spread: SpreadStatus) -> str:
    count = len(spread.shares)
    shares = " · ".join(describe_share(share) for share in spread.shares)
    return f"over {count} member{'s' if count != 1 else ''}: {shares}"


def _line(label: str, text: str) -> str:
    return f"{INDENT}{label:<{LABEL_WIDTH}}{text}"
