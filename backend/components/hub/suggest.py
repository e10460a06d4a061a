"""Which GGUF model of a repository to pull for a computer: a pure choice with its reason."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from backend.components.hub.quant import is_projector
from backend.protocol.types.hub import HubFile

# A model needs memory beyond its file for its context (KV cache) and compute buffers: the file
# may take this share of the memory at most.
FIT_SHARE = 0.8
# Q4_K_M is the usual balance of size and quality: it is preferred over any other model whose
# size is within this share of the largest that fits.
NEAR_SHARE = 0.10
PREFERRED_QUANT = "Q4_K_M"


class Suggestion(msgspec.Struct, frozen=True):
    """The file to pull (a ``HubFile.name``) or None, and why, in one sentence."""

    name: str | None
    reason: str


def suggest_file(files: Sequence[HubFile], memory_bytes: int | None) -> Suggestion:
    """The largest single-file model that fits in ``FIT_SHARE`` of the memory (Q4_K_M when
    it is nearly as large), or None with the reason: no memory given, nothing fits."""
    if memory_bytes is None or memory_bytes <= 0:
        return Suggestion(None, "no memory size was given, so no file is suggested")
    budget = memory_bytes * FIT_SHARE
    models = [file for file in files if not is_projector(file.name) and file.size > 0]
    singles = [file for file in models if file.parts == 1]
    if not singles:
        return Suggestion(None, _no_single_file(models))
    fitting = [file for file in singles if file.size <= budget]
    if not fitting:
        smallest = min(singles, key=lambda file: file.size)
        return Suggestion(
            None,
            f"none fits in {gigabytes(memory_bytes)} of memory: the smallest, {smallest.name} "
            f"({gigabytes(smallest.size)}), needs about {gigabytes(smallest.size / FIT_SHARE)}",
        )
    largest = max(fitting, key=lambda file: (file.size, file.name))
    preferred = _preferred_near(fitting, largest)
    chosen = preferred or largest
    label = chosen.quant or chosen.name
    share = f"{round(FIT_SHARE * 100)}% of {gigabytes(memory_bytes)} of memory"
    if preferred is not None and preferred is not largest:
        return Suggestion(
            chosen.name,
            f"{label} ({gigabytes(chosen.size)}) fits in {share}, the usual balance of size "
            f"and quality, nearly as large as {largest.quant or largest.name}",
        )
    return Suggestion(
        chosen.name,
        f"{label} ({gigabytes(chosen.size)}) is the largest that fits in {share}, leaving "
        "the rest for the context",
    )


def gigabytes(size: float) -> str:
    """A size as Hugging Face shows it (powers of 1000), one decimal: GB, or MB below 1 GB."""
    if size < 1e9:
        return f"{size / 1e6:.1f} MB"
    return f"{size / 1e9:.1f} GB"


def _preferred_near(fitting: Sequence[HubFile], largest: HubFile) -> HubFile | None:
    near = [
        file
        for file in fitting
        if file.quant == PREFERRED_QUANT and file.size >= largest.size * (1 - NEAR_SHARE)
    ]
    return max(near, key=lambda file: file.size) if near else None


def _no_single_file(models: Sequence[HubFile]) -> str:
    if not models:
        return "the repository has no GGUF model file"
    return (
        "every model of this repository is split in several files, which PAIR's llama.cpp "
        "store cannot hold yet; choose a repository with single-file models"
    )
