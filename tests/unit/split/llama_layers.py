"""How llama.cpp places a model's layers given ``-ngl`` and ``--tensor-split``, replayed in
Python (``load_tensors`` in llama.cpp's ``src/llama-model.cpp``) to check the planner's flags."""

from __future__ import annotations

import bisect
import struct
from collections.abc import Sequence

CPU = -1


def _f32(value: float) -> float:
    """``value`` rounded to a C ``float``, as llama.cpp computes the split points."""
    rounded: float = struct.unpack("<f", struct.pack("<f", value))[0]
    return rounded


def placed_layers(layer_count: int, gpu_layers: int, tensor_split: Sequence[int]) -> list[int]:
    """The device index (``CPU`` for the host's CPU) of each of the model's repeating layers;
    llama.cpp counts the output as one more slot after them, which this leaves out."""
    points: list[float] = []
    total = 0.0
    for part in tensor_split:
        total = _f32(total + part)
        points.append(total)
    points = [_f32(point / total) for point in points]
    first_offloaded = max(layer_count + 1 - gpu_layers, 0)
    offloaded = min(gpu_layers, layer_count + 1) if tensor_split else 0
    devices = []
    for layer in range(layer_count):
        slot = layer - first_offloaded
        if layer < first_offloaded or slot >= offloaded:
            devices.append(CPU)
            continue
        fraction = _f32(slot / offloaded)
        devices.append(min(bisect.bisect_right(points, fraction), len(points) - 1))
    return devices
