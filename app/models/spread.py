"""A model spread over members (llama.cpp's RPC backend) in words: who holds which share, and
why a spread runs degraded; plain functions of the broker's ``SpreadStatus``."""

from __future__ import annotations

from backend.protocol.types.engines import SpreadShare, SpreadStatus

_MEMORY = {"vram": "VRAM", "ram": "RAM"}
# What a degraded spread says when the broker gives no reason of its own.
UNKNOWN_DEGRADATION = "a member that holds a share was lost"


def gigabytes(size_bytes: int) -> str:
    """A share's size with one decimal (``16.5 GB``): shares of one model differ by little."""
    return f"{size_bytes / 1e9:.1f} GB"


def _layers(count: int) -> str:
    return f"{count} layer{'s' if count != 1 else ''}"


def share_text(share: SpreadShare) -> str:
    """``gaming-pc 33 layers (16.5 GB VRAM, runs it)``: one member's part, compactly."""
    runs = ", runs it" if share.host else ""
    memory = _MEMORY[share.memory]
    return f"{share.name} {_layers(share.layers)} ({gigabytes(share.bytes)} {memory}{runs})"


def shares_text(spread: SpreadStatus) -> str:
    """``Spread: gaming-pc 33 layers (…) · mac-mini 47 layers (…)``: every member's part."""
    return "Spread: " + " · ".join(share_text(share) for share in spread.shares)


def degraded_reason(spread: SpreadStatus) -> str | None:
    """Why the spread does not run as planned (None: it does)."""
    if spread.state != "degraded":
        return None
    return spread.reason or UNKNOWN_DEGRADATION


def spread_status_text(spread: SpreadStatus) -> str:
    """The row's status: the shares, or for a degraded spread its reason first."""
    reason = degraded_reason(spread)
    if reason is None:
        return shares_text(spread)
    return f"Degraded: {reason}"


def spread_tip(spread: SpreadStatus) -> str:
    """One member a line, with who runs the model, then what went wrong if anything."""
    count = len(spread.shares)
    lines = [f"{spread.model} is spread over {count} computer{'s' if count != 1 else ''}:"]
    for share in spread.shares:
        runs = " (runs the model)" if share.host else ""
        memory = _MEMORY[share.memory]
        lines.append(
            f"• {share.name}: {_layers(share.layers)}, {gigabytes(share.bytes)} of {memory}{runs}"
        )
    reason = degraded_reason(spread)
    if reason is not None:
        lines += ["", f"Degraded: {reason}"]
    return "\n".join(lines)
