"""GPU readings: NVIDIA through NVML, AMD through the amdgpu sysfs files (blocking calls).

Every figure is read on its own; one that cannot be read is omitted, never reported as zero.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from types import ModuleType
from typing import Any

from backend.protocol.types.nodes import NodeGpu

log = logging.getLogger(__name__)

DRM_ROOT = Path("/sys/class/drm")
_CARD = re.compile(r"card\d+")
_NVIDIA_VENDOR = "0x10de"


def read_amd_gpus(root: Path = DRM_ROOT) -> list[NodeGpu]:
    """Cards under ``root`` that publish amdgpu's VRAM or busy files, in card order."""
    gpus: list[NodeGpu] = []
    seen: set[Path] = set()
    try:
        cards = sorted(
            (entry for entry in root.iterdir() if _CARD.fullmatch(entry.name)),
            key=lambda entry: int(entry.name[4:]),
        )
    except OSError:
        return []
    for card in cards:
        device = card / "device"
        resolved = device.resolve()
        if resolved in seen or _read_text(device / "vendor") == _NVIDIA_VENDOR:
            continue
        gpu = _amd_gpu(device)
        if gpu is not None:
            seen.add(resolved)
            gpus.append(gpu)
    return gpus


def _amd_gpu(device: Path) -> NodeGpu | None:
    total = _read_int(device / "mem_info_vram_total")
    used = _read_int(device / "mem_info_vram_used")
    busy = _read_int(device / "gpu_busy_percent")
    if total is None and used is None and busy is None:
        return None
    return NodeGpu(
        vendor="amd",
        name=_amd_name(device),
        vram_total_bytes=total if total else None,
        vram_used_bytes=used,
        utilization_percent=float(busy) if busy is not None and 0 <= busy <= 100 else None,
    )


def _amd_name(device: Path) -> str | None:
    product = _read_text(device / "product_name")
    if product:
        return product
    model = _read_text(device / "device")
    return f"AMD GPU {model}" if model else None


def _read_text(path: Path) -> str | None:
    try:
        text = path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text or None


def _read_int(path: Path) -> int | None:
    text = _read_text(path)
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return value if value >= 0 else None


class NvidiaReader:
    """Owns the NVML session; without the NVIDIA library or driver it reads no GPUs, quietly."""

    def __init__(self, nvml: ModuleType | Any | None = None) -> None:
        self._nvml = nvml
        self._started = False

    def start(self) -> bool:
        """Load and initialise NVML; False (logged once) when it is not there."""
        if self._started:
            return True
        try:
            if self._nvml is None:
                import pynvml

                self._nvml = pynvml
            self._nvml.nvmlInit()
        except Exception as exc:  # NVMLError subclasses, or a broken library
            log.info("no NVIDIA GPU readings: %s", exc)
            self._nvml = None
            return False
        self._started = True
        return True

    def read(self) -> list[NodeGpu]:
        """Every NVIDIA GPU, in NVML's order; empty when NVML is not running."""
        if not self._started or self._nvml is None:
            return []
        count = self._call(self._nvml.nvmlDeviceGetCount)
        if not isinstance(count, int):
            return []
        return [gpu for index in range(count) if (gpu := self._device(index)) is not None]

    def close(self) -> None:
        """Shut NVML down; idempotent."""
        if self._started and self._nvml is not None:
            self._call(self._nvml.nvmlShutdown)
        self._started = False

    def _device(self, index: int) -> NodeGpu | None:
        assert self._nvml is not None
        handle = self._call(self._nvml.nvmlDeviceGetHandleByIndex, index)
        if handle is None:
            return None
        name = self._call(self._nvml.nvmlDeviceGetName, handle)
        memory = self._call(self._nvml.nvmlDeviceGetMemoryInfo, handle)
        rates = self._call(self._nvml.nvmlDeviceGetUtilizationRates, handle)
        total = getattr(memory, "total", None)
        return NodeGpu(
            vendor="nvidia",
            name=name.decode() if isinstance(name, bytes) else name or None,
            vram_total_bytes=total if isinstance(total, int) and total > 0 else None,
            vram_used_bytes=_non_negative_int(getattr(memory, "used", None)),
            utilization_percent=_percent(getattr(rates, "gpu", None)),
        )

    def _call(self, function: Any, *args: Any) -> Any:
        # A unified-memory GPU answers NVMLError_NotSupported for its memory, for example.
        try:
            return function(*args)
        except Exception as exc:
            log.debug("NVML %s failed: %s", getattr(function, "__name__", function), exc)
            return None


def _non_negative_int(value: object) -> int | None:
    return value if isinstance(value, int) and value >= 0 else None


def _percent(value: object) -> float | None:
    if isinstance(value, int) and 0 <= value <= 100:
        return float(value)
    return None
