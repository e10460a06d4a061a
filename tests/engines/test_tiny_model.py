"""The generated GGUF parses back with gguf's own reader: metadata, tokenizer, tensors, shapes."""

from __future__ import annotations

import importlib.util
from importlib.machinery import ModuleSpec
from pathlib import Path

import gguf
import pytest

from backend.devtools import tiny_model
from backend.devtools.tiny_model import (
    BYTE_TOKEN,
    SHAPES,
    MissingDevDependencyError,
    ModelShape,
    build_vocabulary,
    write_model,
)

PER_BLOCK = (
    "attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
    "ffn_norm", "ffn_gate", "ffn_up", "ffn_down",
)  # fmt: skip


def _field(reader: gguf.GGUFReader, key: str) -> object:
    return reader.fields[key].contents()


def _expected_shapes(shape: ModelShape, vocabulary_size: int) -> dict[str, tuple[int, ...]]:
    """GGML dimensions (the reader's ``shape``), innermost first."""
    embedding, feed_forward = shape.embedding_length, shape.feed_forward_length
    expected = {
        "token_embd.weight": (embedding, vocabulary_size),
        "output_norm.weight": (embedding,),
        "output.weight": (embedding, vocabulary_size),
    }
    for block in range(shape.block_count):
        square = (embedding, embedding)
        expected |= {
            f"blk.{block}.attn_norm.weight": (embedding,),
            f"blk.{block}.attn_q.weight": square,
            f"blk.{block}.attn_k.weight": square,
            f"blk.{block}.attn_v.weight": square,
            f"blk.{block}.attn_output.weight": square,
            f"blk.{block}.ffn_norm.weight": (embedding,),
            f"blk.{block}.ffn_gate.weight": (embedding, feed_forward),
            f"blk.{block}.ffn_up.weight": (embedding, feed_forward),
            f"blk.{block}.ffn_down.weight": (feed_forward, embedding),
        }
    return expected


def test_vocabulary_is_specials_then_bytes_then_pieces() -> None:
    vocabulary = build_vocabulary()
    assert [token.piece for token in vocabulary[:3]] == ["<unk>", "<s>", "</s>"]
    byte_tokens = vocabulary[3:259]
    assert [token.piece for token in byte_tokens[:2]] == ["<0x00>", "<0x01>"]
    assert byte_tokens[-1].piece == "<0xFF>"
    assert {token.kind for token in byte_tokens} == {BYTE_TOKEN}
    assert 24 <= len(vocabulary) - 259 <= 72  # "a few dozen" normal pieces
    assert len({token.piece for token in vocabulary}) == len(vocabulary)


def test_tiny_model_parses_back_with_expected_metadata(tmp_path: Path) -> None:
    path = write_model(tmp_path / "tiny.gguf")
    reader = gguf.GGUFReader(path)
    shape = SHAPES["tiny"]
    assert _field(reader, "general.architecture") == "llama"
    assert _field(reader, "llama.embedding_length") == 64
    assert _field(reader, "llama.block_count") == 2
    assert _field(reader, "llama.attention.head_count") == 4
    assert _field(reader, "llama.feed_forward_length") == 128
    assert _field(reader, "llama.context_length") == 2048
    assert _field(reader, "tokenizer.ggml.model") == "llama"
    tokens = _field(reader, "tokenizer.ggml.tokens")
    assert isinstance(tokens, list)
    assert len(tokens) == len(build_vocabulary())
    assert tokens[3] == "<0x00>"
    types = _field(reader, "tokenizer.ggml.token_type")
    assert isinstance(types, list)
    assert types[3:259] == [BYTE_TOKEN] * 256
    assert "add_generation_prompt" in str(_field(reader, "tokenizer.chat_template"))
    tensors = {tensor.name: tensor for tensor in reader.tensors}
    expected = _expected_shapes(shape, len(tokens))
    assert set(tensors) == set(expected)
    assert {name: tuple(int(n) for n in t.shape) for name, t in tensors.items()} == expected
    assert {t.tensor_type for t in tensors.values()} == {gguf.GGMLQuantizationType.F32}
    assert path.stat().st_size < 1_000_000


def test_busy_size_is_wider_and_deeper(tmp_path: Path) -> None:
    shape = ModelShape(embedding_length=128, block_count=3, head_count=4, feed_forward_length=256)
    reader = gguf.GGUFReader(write_model(tmp_path / "custom.gguf", shape=shape))
    assert _field(reader, "llama.block_count") == 3
    names = {tensor.name for tensor in reader.tensors}
    assert {f"blk.2.{part}.weight" for part in PER_BLOCK} <= names
    busy = SHAPES["busy"]
    assert busy.block_count > SHAPES["tiny"].block_count
    assert busy.embedding_length > SHAPES["tiny"].embedding_length


def test_same_seed_gives_identical_bytes_and_another_seed_does_not(tmp_path: Path) -> None:
    first = write_model(tmp_path / "a.gguf", seed=7).read_bytes()
    again = write_model(tmp_path / "b.gguf", seed=7).read_bytes()
    other = write_model(tmp_path / "c.gguf", seed=8).read_bytes()
    assert first == again
    assert first != other
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.gguf", "b.gguf", "c.gguf"]


def test_shape_rejects_heads_that_do_not_divide_the_embedding() -> None:
    with pytest.raises(ValueError, match="even-sized heads"):
        ModelShape(embedding_length=64, head_count=5)


def test_missing_numpy_or_gguf_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    real_find_spec = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> ModuleSpec | None:
        return None if name == "gguf" else real_find_spec(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(MissingDevDependencyError, match=r"gguf; install them"):
        write_model(tmp_path / "never.gguf")
    assert not list(tmp_path.iterdir())


def test_command_line_writes_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "cli.gguf"
    assert tiny_model.main([str(target), "--size", "tiny", "--seed", "3"]) == 0
    assert capsys.readouterr().out.strip() == str(target)
    assert gguf.GGUFReader(target).tensors
