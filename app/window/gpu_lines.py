"""How GPU and memory figures read on the node cards and the Engines page: a figure that is not
known is left out (never shown as zero), and a computer without a GPU gets no GPU text at all."""

from __future__ import annotations

from collections.abc import Sequence

from app.models.nodes import GpuLine

GIB = 1024**3
NO_VALUE = "—"


def format_percent(value: float | None) -> str:
    """``37 %``, or a dash when not measured."""
    return NO_VALUE if value is None else f"{value:.0f} %"


def format_used(used: int | None, total: int | None) -> str:
    """``12.3 / 31.2 GB``; a side that is unknown reads as a dash; empty when both are."""
    if used is None and total is None:
        return ""
    used_text = NO_VALUE if used is None else f"{used / GIB:.1f}"
    total_text = NO_VALUE if total is None else f"{total / GIB:.1f}"
    return f"{used_text} / {total_text}\u00a0GB"  # no break before the unit


def vram_fraction(used: int | None, total: int | None) -> float | None:
    """The share of VRAM in use (0-1), None unless both figures are known."""
    return used / total if used is not None and total else None


def gpu_figures(gpu: GpuLine) -> str:
    """``37 % · VRAM 8.0 / 24.0 GB``: only the figures that were read."""
    parts = [] if gpu.utilization_percent is None else [format_percent(gpu.utilization_percent)]
    vram = format_used(gpu.vram_used_bytes, gpu.vram_total_bytes)
    if vram:
        parts.append(f"VRAM {vram}")
    return " · ".join(parts)


def gpu_text(gpu: GpuLine) -> str:
    """One GPU on one line: its name, then whatever figures were read."""
    figures = gpu_figures(gpu)
    return f"{gpu.name} · {figures}" if figures else gpu.name


def gpus_text(gpus: Sequence[GpuLine]) -> str:
    """Every GPU, one line each; empty for a computer without one."""
    return "\n".join(gpu_text(gpu) for gpu in gpus)


def busiest_percent(gpus: Sequence[GpuLine]) -> float | None:
    """The busiest GPU's utilisation, None when no GPU's could be read."""
    read = [gpu.utilization_percent for gpu in gpus if gpu.utilization_percent is not None]
    return max(read) if read else None


def summed_vram(gpus: Sequence[GpuLine]) -> tuple[int | None, int | None]:
    """VRAM used and total over every GPU; a side no GPU reported is None."""
    used = [gpu.vram_used_bytes for gpu in gpus if gpu.vram_used_bytes is not None]
    total = [gpu.vram_total_bytes for gpu in gpus if gpu.vram_total_bytes is not None]
    return (sum(used) if used else None, sum(total) if total else None)


def memory_size(total: int | None) -> str | None:
    """``24 GB`` (rounded to whole GB), None when not known."""
    return None if not total else f"{total / GIB:.0f}\u00a0GB"
