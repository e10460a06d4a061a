"""Write a small llama-architecture GGUF with random weights, for tests and the demo.

The file is a real model as far as llama.cpp is concerned (SPM tokenizer, chat template, F32
tensors), so a real ``llama-server`` loads it and generates tokens; the text is meaningless.
One quirk is deliberate: the model never samples ``</s>``, so every request runs until its
``max_tokens`` (or the slot's context) is used up, which keeps tests deterministic in length.

    python -m backend.devtools.tiny_model OUT.gguf [--size tiny|busy] [--seed N]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal, get_args

import msgspec

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    from gguf import GGUFWriter

ModelSize = Literal["tiny", "busy"]

# GGUF token types, as gguf.TokenType numbers them (kept here so the vocabulary needs no import).
NORMAL_TOKEN = 1
UNKNOWN_TOKEN = 2
CONTROL_TOKEN = 3
BYTE_TOKEN = 6

UNKNOWN_ID, BOS_ID, EOS_ID = 0, 1, 2

_WORDS = (
    "▁the", "▁a", "▁and", "▁of", "▁to", "▁is", "▁in", "▁it", "▁hello", "▁world",
    "▁model", "▁router", "▁node", "▁token", "▁fast", "▁slow", "▁yes", "▁no", "▁ok", "▁PAIR",
)  # fmt: skip
_CHARACTERS = "▁abcdefghijklmnopqrstuvwxyz.,!?"

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)

# The residual-stream dimension that carries a constant positive signal; the output row of
# </s> reads it with a large negative weight, which is what keeps </s> from ever being sampled.
_BIAS_DIMENSION = 0
_WEIGHT_SCALE = 0.02


class ModelShape(msgspec.Struct, frozen=True):
    """Hyperparameters of a generated model (llama architecture, no grouped-query attention)."""

    embedding_length: int = 64
    block_count: int = 2
    head_count: int = 4
    feed_forward_length: int = 128
    context_length: int = 2048

    def __post_init__(self) -> None:
        if self.embedding_length % self.head_count or (self.head_dimension % 2):
            raise ValueError(f"embedding_length must split into even-sized heads: {self}")

    @property
    def head_dimension(self) -> int:
        """Size of one attention head (also the RoPE dimension count)."""
        return self.embedding_length // self.head_count


SHAPES: dict[ModelSize, ModelShape] = {
    # ~0.5 MB; thousands of tokens per second on one core.
    "tiny": ModelShape(),
    # ~110 MB; slow enough on CPU that a long request stays visibly busy for seconds.
    "busy": ModelShape(
        embedding_length=512,
        block_count=8,
        head_count=8,
        feed_forward_length=1536,
        context_length=4096,
    ),
}


class Token(msgspec.Struct, frozen=True):
    """One vocabulary entry: the SentencePiece piece, its merge score and its GGUF type."""

    piece: str
    score: float
    kind: int


class MissingDevDependencyError(RuntimeError):
    """numpy or gguf (dev extras) are not installed."""


def build_vocabulary() -> list[Token]:
    """The SPM vocabulary: <unk>, <s>, </s>, the 256 byte tokens, then a few dozen pieces."""
    tokens = [
        Token("<unk>", 0.0, UNKNOWN_TOKEN),
        Token("<s>", 0.0, CONTROL_TOKEN),
        Token("</s>", 0.0, CONTROL_TOKEN),
    ]
    tokens += [Token(f"<0x{value:02X}>", 0.0, BYTE_TOKEN) for value in range(256)]
    pieces = [*_WORDS, *_CHARACTERS]
    tokens += [Token(piece, -float(rank), NORMAL_TOKEN) for rank, piece in enumerate(pieces)]
    return tokens


def require_dev_dependencies() -> None:
    """Raise MissingDevDependencyError naming what is missing, before anything is written."""
    missing = [name for name in ("numpy", "gguf") if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingDevDependencyError(
            f"writing a GGUF model needs the dev extras {' and '.join(missing)}; "
            "install them with: pip install -e '.[dev]'"
        )


def write_model(
    path: Path, *, size: ModelSize = "tiny", shape: ModelShape | None = None, seed: int = 0
) -> Path:
    """Write the model to ``path`` (atomically); the same shape and seed give the same bytes."""
    require_dev_dependencies()
    import gguf
    import numpy as np

    chosen = shape or SHAPES[size]
    vocabulary = build_vocabulary()
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    writer = gguf.GGUFWriter(partial, arch="llama")
    try:
        _add_metadata(writer, chosen, vocabulary, name=f"PAIR {size} test model")
        for name, tensor in _tensors(chosen, len(vocabulary), np.random.default_rng(seed)):
            writer.add_tensor(name, tensor)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    finally:
        writer.close()
    partial.replace(path)
    return path


def _add_metadata(
    writer: GGUFWriter, shape: ModelShape, vocabulary: Sequence[Token], *, name: str
) -> None:
    import gguf

    writer.add_name(name)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_context_length(shape.context_length)
    writer.add_embedding_length(shape.embedding_length)
    writer.add_block_count(shape.block_count)
    writer.add_feed_forward_length(shape.feed_forward_length)
    writer.add_head_count(shape.head_count)
    writer.add_head_count_kv(shape.head_count)
    writer.add_rope_dimension_count(shape.head_dimension)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(len(vocabulary))
    writer.add_tokenizer_model("llama")
    writer.add_token_list([token.piece for token in vocabulary])
    writer.add_token_scores([token.score for token in vocabulary])
    writer.add_token_types([token.kind for token in vocabulary])
    writer.add_unk_token_id(UNKNOWN_ID)
    writer.add_bos_token_id(BOS_ID)
    writer.add_eos_token_id(EOS_ID)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)


def _tensors(
    shape: ModelShape, vocabulary_size: int, rng: np.random.Generator
) -> Iterator[tuple[str, npt.NDArray[np.float32]]]:
    """Name and data of every tensor; numpy shapes are GGML's dimensions reversed."""
    import numpy as np

    embedding, feed_forward = shape.embedding_length, shape.feed_forward_length

    def random(*dimensions: int) -> npt.NDArray[np.float32]:
        return rng.standard_normal(dimensions, dtype=np.float32) * np.float32(_WEIGHT_SCALE)

    token_embedding = random(vocabulary_size, embedding)
    token_embedding[:, _BIAS_DIMENSION] = 1.0
    yield "token_embd.weight", token_embedding
    for block in range(shape.block_count):
        prefix = f"blk.{block}"
        yield f"{prefix}.attn_norm.weight", np.ones(embedding, dtype=np.float32)
        for projection in ("attn_q", "attn_k", "attn_v", "attn_output"):
            yield f"{prefix}.{projection}.weight", random(embedding, embedding)
        yield f"{prefix}.ffn_norm.weight", np.ones(embedding, dtype=np.float32)
        yield f"{prefix}.ffn_gate.weight", random(feed_forward, embedding)
        yield f"{prefix}.ffn_up.weight", random(feed_forward, embedding)
        yield f"{prefix}.ffn_down.weight", random(embedding, feed_forward)
    yield "output_norm.weight", np.ones(embedding, dtype=np.float32)
    output = rng.standard_normal((vocabulary_size, embedding), dtype=np.float32)
    output[:, _BIAS_DIMENSION] = 0.0
    output[EOS_ID, :] = 0.0
    output[EOS_ID, _BIAS_DIMENSION] = -100.0
    yield "output.weight", output


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: write one model file and print its path."""
    parser = argparse.ArgumentParser(
        prog="python -m backend.devtools.tiny_model",
        description="Write a small llama-architecture GGUF with random weights.",
    )
    parser.add_argument("output", type=Path, help="the .gguf file to write")
    parser.add_argument("--size", choices=get_args(ModelSize), default="tiny")
    parser.add_argument("--seed", type=int, default=0)
    arguments = parser.parse_args(argv)
    try:
        path = write_model(arguments.output, size=arguments.size, seed=arguments.seed)
    except MissingDevDependencyError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
