"""What a GGUF file's name says: quantization, split parts, projectors."""

from __future__ import annotations

import pytest

from backend.components.hub.quant import SplitPart, is_gguf, is_projector, quantization, split_part


@pytest.mark.parametrize(
    ("path", "quant"),
    [
        ("qwen2.5-0.5b-instruct-q4_k_m.gguf", "Q4_K_M"),
        ("Llama-3.2-1B-Instruct-Q8_0.gguf", "Q8_0"),
        ("Llama-3.2-1B-Instruct-IQ2_XS.gguf", "IQ2_XS"),
        ("model.IQ3_XXS.gguf", "IQ3_XXS"),
        ("tinyllama-1.1b-chat-v1.0.Q5_K_M.gguf", "Q5_K_M"),
        ("Llama-3.2-1B-Instruct-f16.gguf", "F16"),
        ("qwen2.5-0.5b-instruct-fp16.gguf", "F16"),
        ("BF16/Qwen2.5-72B-Instruct-BF16-00001-of-00003.gguf", "BF16"),
        ("nomic-embed-text-v1.5.f32.gguf", "F32"),
        ("Qwen3-30B-A3B-UD-Q4_K_XL.gguf", "Q4_K_XL"),
        ("model_q6_k.gguf", "Q6_K"),
        ("Qwen2.5-7B-Instruct.gguf", None),
        ("Q4_K_M/Qwen2.5-7B.gguf", None),  # a folder's name is not the file's
    ],
)
def test_the_quantization_is_read_from_the_file_name(path: str, quant: str | None) -> None:
    assert quantization(path) == quant


def test_a_split_part_names_its_model_part_and_count() -> None:
    assert split_part("Q8_0/Qwen2.5-72B-Instruct-Q8_0-00002-of-00002.gguf") == SplitPart(
        "Q8_0/Qwen2.5-72B-Instruct-Q8_0", 2, 2
    )
    assert split_part("model-00001-of-00001.gguf") is None  # one part is a single file
    assert split_part("model-Q4_K_M.gguf") is None


def test_gguf_files_and_projectors_are_told_apart() -> None:
    assert is_gguf("a/b.GGUF") and not is_gguf("README.md")
    assert is_projector("mmproj-model-f16.gguf") and not is_projector("mmproj/model-Q4_0.gguf")
