"""What a GGUF file's name says: its quantization (``Q4_K_M``, ``IQ2_XS``, ``BF16``...) and
whether it is one part of a model split in several files (``-00001-of-00003.gguf``)."""

from __future__ import annotations

import re

import msgspec

GGUF_SUFFIX = ".gguf"
# A quantization stands between separators: ``model.Q4_K_M.gguf``, ``model-IQ2_XS.gguf``,
# ``model_q8_0.gguf``; ``UD-Q4_K_XL`` (Unsloth's dynamic quantizations) keeps its ``Q4_K_XL``.
_QUANT = re.compile(
    r"(?<![A-Za-z0-9])(I?Q[1-8](?:_[A-Z0-9]{1,3})*|TQ[12]_0|MXFP4(?:_MOE)?|BF16|F16|FP16|F32)"
    r"(?![A-Za-z0-9])",
    re.IGNORECASE,
)
_SPLIT = re.compile(r"^(?P<stem>.+)-(?P<part>\d{5})-of-(?P<total>\d{5})\.gguf$", re.IGNORECASE)


class SplitPart(msgspec.Struct, frozen=True):
    """One file of a split model: the model's stem, this part's number and the parts' count."""

    stem: str
    part: int
    total: int


def is_gguf(path: str) -> bool:
    """Whether a repository path is a GGUF file."""
    return path.lower().endswith(GGUF_SUFFIX)


def quantization(path: str) -> str | None:
    """The quantization a file's name says (upper case, ``FP16`` read as ``F16``), or None."""
    name = path.rsplit("/", 1)[-1]
    found = _QUANT.findall(name)
    if not found:
        return None
    quant = found[-1].upper()  # the last one: a model's own name may look like one
    return "F16" if quant == "FP16" else quant


def split_part(path: str) -> SplitPart | None:
    """The part a file is of a split model, or None for a single file."""
    match = _SPLIT.match(path)
    if match is None:
        return None
    total = int(match["total"])
    if total < 2:
        return None
    return SplitPart(match["stem"], int(match["part"]), total)


def is_projector(path: str) -> bool:
    """Whether a file is a vision projector (``mmproj``): it goes with a model, is not one."""
    return "mmproj" in path.rsplit("/", 1)[-1].lower()
