"""A model's layer count, read from its GGUF header's metadata."""

from __future__ import annotations

import pytest

from backend.common.gguf import GgufInfo, Scalar
from backend.components.split.model_shape import layer_count


def _info(architecture: str | None, **metadata: Scalar) -> GgufInfo:
    return GgufInfo(3, 0, architecture, None, None, None, metadata)


def test_the_layer_count_is_the_architectures_block_count() -> None:
    assert layer_count(_info("llama", **{"llama.block_count": 80})) == 80


@pytest.mark.parametrize(
    "metadata",
    [{}, {"llama.block_count": 0}, {"llama.block_count": "80"}, {"llama.block_count": True},
     {"qwen2.block_count": 28}],
)  # fmt: skip
def test_a_header_without_a_layer_count_is_a_clear_error(metadata: dict[str, Scalar]) -> None:
    with pytest.raises(ValueError, match=r"no layer count \(llama.block_count"):
        layer_count(_info("llama", **metadata))


def test_a_header_without_an_architecture_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="names no architecture"):
        layer_count(_info(None, **{"llama.block_count": 80}))
