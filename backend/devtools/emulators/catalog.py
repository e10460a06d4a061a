"""Installed models of an emulated engine, with plausible details derived from their names."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Final

import msgspec
from msgspec.structs import replace

DEFAULT_HOST: Final = "registry.ollama.ai"
DEFAULT_NAMESPACE: Final = "library"


class ModelName(msgspec.Struct, frozen=True):
    """Ollama's ``[host/][namespace/]model[:tag]`` with its defaults filled in."""

    host: str
    namespace: str
    model: str
    tag: str

    @property
    def display(self) -> str:
        """Ollama's ``DisplayShortest``: ``llama3.2:latest``, ``user/m:tag``, ``hf.co/u/m:tag``."""
        if self.host != DEFAULT_HOST:
            return f"{self.host}/{self.namespace}/{self.model}:{self.tag}"
        if self.namespace != DEFAULT_NAMESPACE:
            return f"{self.namespace}/{self.model}:{self.tag}"
        return f"{self.model}:{self.tag}"


def parse_model_name(text: str) -> ModelName:
    """Split an Ollama model name; the tag defaults to ``latest``."""
    path, tag = text, "latest"
    last_slash = text.rfind("/")
    colon = text.rfind(":")
    if colon > last_slash:
        path, tag = text[:colon], text[colon + 1 :] or "latest"
    parts = path.split("/")
    model = parts[-1]
    namespace = parts[-2] if len(parts) >= 2 else DEFAULT_NAMESPACE
    host = "/".join(parts[:-2]) if len(parts) >= 3 else DEFAULT_HOST
    return ModelName(host, namespace, model, tag)


class ModelSpec(msgspec.Struct, frozen=True):
    """One installed model: identity, size and the details engines report about it."""

    name: str
    family: str
    parameter_count: int
    quantization: str
    size: int
    # The manifest's digest (``/api/tags``) and the weights blob's (``/api/show``'s ``FROM``):
    # real Ollama's differ, and only the weights' names the model across names and engines.
    digest: str
    weights_digest: str
    context_length: int
    embedding_length: int
    capabilities: tuple[str, ...]
    modified_ns: int

    @property
    def is_embedding(self) -> bool:
        """An embedding-only model (no completion capability)."""
        return "completion" not in self.capabilities

    @property
    def parameter_size(self) -> str:
        """Ollama's ``parameter_size``: ``3.2B``, ``137M``."""
        if self.parameter_count >= 1_000_000_000:
            return f"{self.parameter_count / 1e9:.1f}B"
        return f"{round(self.parameter_count / 1e6)}M"

    @property
    def params_string(self) -> str:
        """LM Studio's ``params_string``: ``7B``, ``270M``."""
        if self.parameter_count >= 1_000_000_000:
            return f"{self.parameter_count / 1e9:.3g}B"
        return f"{self.parameter_count / 1e6:.3g}M"

    @property
    def bits_per_weight(self) -> float:
        """Average bits per weight of the quantization."""
        return _BITS.get(self.quantization, 4.85)


class _Family(msgspec.Struct, frozen=True):
    marker: str
    family: str
    parameters: int
    context_length: int
    embedding_length: int
    capabilities: tuple[str, ...]


_CHAT = ("completion", "tools")
_EMBED = ("embedding",)
# Most specific marker first: the first marker found in the model name wins.
_FAMILIES: Final = (
    _Family("nomic-embed", "nomic-bert", 137_000_000, 2048, 768, _EMBED),
    _Family("all-minilm", "bert", 23_000_000, 512, 384, _EMBED),
    _Family("mxbai-embed", "bert", 334_000_000, 512, 1024, _EMBED),
    _Family("embed", "bert", 110_000_000, 512, 768, _EMBED),
    _Family("llama3.2", "llama", 3_210_000_000, 131072, 3072, _CHAT),
    _Family("llama-3.2", "llama", 3_210_000_000, 131072, 3072, _CHAT),
    _Family("tinyllama", "llama", 1_100_000_000, 2048, 2048, ("completion",)),
    _Family("llama", "llama", 8_030_000_000, 131072, 4096, _CHAT),
    _Family("qwen3", "qwen3", 8_190_000_000, 40960, 4096, _CHAT),
    _Family("deepseek-r1", "qwen2", 7_620_000_000, 131072, 3584, ("completion",)),
    _Family("qwen", "qwen2", 7_620_000_000, 32768, 3584, _CHAT),
    _Family("gemma", "gemma3", 4_300_000_000, 131072, 2560, ("completion", "vision")),
    _Family("mistral", "llama", 7_250_000_000, 32768, 4096, _CHAT),
    _Family("phi", "phi3", 14_700_000_000, 16384, 5120, ("completion",)),
    _Family("smollm", "llama", 1_710_000_000, 8192, 2048, ("completion",)),
    _Family("gpt-oss", "gptoss", 20_900_000_000, 131072, 2880, _CHAT),
)
_GUESSED_SIZES: Final = (1_240_000_000, 3_210_000_000, 7_620_000_000, 8_030_000_000)
_BITS: Final = {
    "Q2_K": 2.6,
    "Q3_K_M": 3.9,
    "Q4_0": 4.5,
    "Q4_K_S": 4.6,
    "Q4_K_M": 4.85,
    "Q5_K_M": 5.7,
    "Q6_K": 6.6,
    "Q8_0": 8.5,
    "F16": 16.0,
    "BF16": 16.0,
    "FP16": 16.0,
}
_PARAMETERS: Final = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)([bm])(?![a-z])")
_QUANTIZATION: Final = re.compile(r"(q\d_k_[sml]|q\d_k|q\d_\d|bf16|fp16|f16)", re.IGNORECASE)
_SHA256_HEX: Final = re.compile(r"[0-9a-f]{64}")


def spec_for(name: str, modified_ns: int, weights_digest: str | None = None) -> ModelSpec:
    """A deterministic, plausible model for ``name`` (family, size, digests, quantization).

    ``weights_digest`` (hex, or ``sha256:<hex>``) is the weights blob's digest; absent, one
    derived from the manifest digest, so two names never share weights unless told to.
    """
    lowered = name.lower()
    family = _family_of(lowered)
    parameters = _parameters_of(lowered, family)
    quantization = _quantization_of(lowered, family)
    bits = _BITS.get(quantization, 4.85)
    digest = hashlib.sha256(name.encode()).hexdigest()
    overhead = int(digest[:6], 16) % 50_000_000
    return ModelSpec(
        name=name,
        family=family.family,
        parameter_count=parameters,
        quantization=quantization,
        size=int(parameters * bits / 8) + overhead,
        digest=digest,
        weights_digest=_bare_hex(weights_digest) or hashlib.sha256(digest.encode()).hexdigest(),
        context_length=family.context_length,
        embedding_length=family.embedding_length,
        capabilities=family.capabilities,
        modified_ns=modified_ns,
    )


def _bare_hex(digest: str | None) -> str:
    """``sha256:<hex>`` or ``<hex>`` as lower-case hex; empty for None."""
    if not digest:
        return ""
    return digest.removeprefix("sha256:").lower()


def parse_weights(text: str) -> tuple[str, str]:
    """``NAME=sha256:<hex>`` (or ``NAME=<hex>``) as (name, hex); ValueError when malformed."""
    name, separator, digest = text.partition("=")
    hex_digest = _bare_hex(digest.strip())
    if not separator or not name.strip() or not _SHA256_HEX.fullmatch(hex_digest):
        raise ValueError(f"{text!r} is not NAME=sha256:<64 hex digits>")
    return name.strip(), hex_digest


def is_known_family(name: str) -> bool:
    """Whether ``name`` belongs to a model family the emulators know by name."""
    lowered = name.lower()
    return any(family.marker in lowered for family in _FAMILIES)


def _family_of(lowered: str) -> _Family:
    for family in _FAMILIES:
        if family.marker in lowered:
            return family
    guessed = _GUESSED_SIZES[int(hashlib.sha256(lowered.encode()).hexdigest(), 16) % 4]
    return _Family("", "llama", guessed, 8192, 4096, _CHAT)


def _parameters_of(lowered: str, family: _Family) -> int:
    match = _PARAMETERS.search(lowered.replace(":", "-"))
    if match is None:
        return family.parameters
    scale = 1_000_000_000 if match.group(2) == "b" else 1_000_000
    return int(float(match.group(1)) * scale)


def _quantization_of(lowered: str, family: _Family) -> str:
    match = _QUANTIZATION.search(lowered)
    if match is not None:
        return match.group(1).upper()
    return "F16" if "embedding" in family.capabilities else "Q4_K_M"


class Catalog:
    """The models an engine has installed, looked up case-insensitively by canonical name."""

    def __init__(self, canonical: Callable[[str], str]) -> None:
        self._canonical = canonical
        self._models: dict[str, ModelSpec] = {}

    def canonical(self, name: str) -> str:
        """The name the engine lists for ``name`` (Ollama adds ``:latest``)."""
        return self._canonical(name)

    def find(self, name: str) -> ModelSpec | None:
        """The installed model called ``name``, if any."""
        return self._models.get(self._canonical(name).lower())

    def add(self, spec: ModelSpec) -> None:
        """Install (or replace) a model."""
        self._models[spec.name.lower()] = spec

    def remove(self, name: str) -> bool:
        """Delete a model; False when it was not installed."""
        return self._models.pop(self._canonical(name).lower(), None) is not None

    def copy(self, source: ModelSpec, destination: str, modified_ns: int) -> ModelSpec:
        """Install ``source`` again under ``destination`` (same blobs, same digest)."""
        copied = replace(source, name=self._canonical(destination), modified_ns=modified_ns)
        self.add(copied)
        return copied

    def newest_first(self) -> list[ModelSpec]:
        """Every model, most recently modified first (Ollama's ``/api/tags`` order)."""
        return sorted(self._models.values(), key=lambda spec: -spec.modified_ns)

    def __iter__(self) -> Iterator[ModelSpec]:
        return iter(list(self._models.values()))

    def __len__(self) -> int:
        return len(self._models)


def ollama_catalog(
    names: tuple[str, ...], now_ns: int, weights: Mapping[str, str] | None = None
) -> Catalog:
    """An Ollama catalog holding ``names``, listed in the given order (first is newest).

    ``weights`` maps a model name to its weights digest (see ``spec_for``).
    """
    catalog = Catalog(lambda name: parse_model_name(name).display)
    for index, name in enumerate(names):
        canonical = catalog.canonical(name)
        modified_ns = now_ns - index * 60 * 1_000_000_000
        catalog.add(spec_for(canonical, modified_ns, weights_for(weights or {}, canonical)))
    return catalog


def weights_for(weights: Mapping[str, str], canonical: str) -> str | None:
    """The weights digest ``weights`` gives the Ollama model ``canonical`` (any spelling)."""
    for name, digest in weights.items():
        if parse_model_name(name).display.lower() == canonical.lower():
            return digest
    return None


def lmstudio_catalog(keys: tuple[str, ...], now_ns: int) -> Catalog:
    """An LM Studio catalog of model keys (keys are used as given)."""
    catalog = Catalog(lambda key: key)
    for index, key in enumerate(keys):
        catalog.add(spec_for(key, now_ns - index * 60 * 1_000_000_000))
    return catalog
