"""The Ollama emulator's weights digest: a blob apart from the manifest, settable per model."""

from __future__ import annotations

import hashlib

import pytest

from backend.devtools.emulators.catalog import ollama_catalog, parse_weights, spec_for
from backend.devtools.emulators.ollama_models import show_body, tag_entry
from backend.devtools.emulators.ollama_pull import layers_for
from backend.devtools.emulators.ollama_state import OllamaConfig, OllamaEngine
from tests.fakes import FakeClock

GGUF_HEX = hashlib.sha256(b"the same weights").hexdigest()


def test_a_model_has_weights_apart_from_its_manifest_derived_from_the_name() -> None:
    spec = spec_for("qwen2.5:0.5b", 0)
    assert len(spec.weights_digest) == 64 and spec.weights_digest != spec.digest
    assert spec.weights_digest == spec_for("qwen2.5:0.5b", 7).weights_digest
    assert spec.weights_digest != spec_for("qwen2.5:1.5b", 0).weights_digest


def test_show_names_the_weights_blob_and_tags_the_manifest() -> None:
    spec = spec_for("llama3.2:latest", 0, f"sha256:{GGUF_HEX}")
    modelfile = show_body(spec)["modelfile"]
    assert f"\nFROM /root/.ollama/models/blobs/sha256-{GGUF_HEX}\n" in modelfile
    assert tag_entry(spec)["digest"] == spec.digest != GGUF_HEX
    assert layers_for(spec)[0].digest == GGUF_HEX


def test_the_configured_weights_reach_the_model_under_any_spelling_of_its_name() -> None:
    catalog = ollama_catalog(("llama3.2", "qwen2.5"), 10**18, {"llama3.2:latest": GGUF_HEX})
    llama, qwen = catalog.find("llama3.2"), catalog.find("qwen2.5")
    assert llama is not None and qwen is not None
    assert llama.weights_digest == GGUF_HEX and qwen.weights_digest != GGUF_HEX


def test_a_pulled_model_gets_its_configured_weights_and_a_copy_keeps_them() -> None:
    config = OllamaConfig(models=(), weights={"qwen3": f"sha256:{GGUF_HEX.upper()}"})
    engine = OllamaEngine(config, FakeClock())
    pulled = engine.pullable("qwen3:latest")
    assert pulled is not None and pulled.weights_digest == GGUF_HEX
    copied = engine.catalog.copy(pulled, "mine", 0)
    assert copied.weights_digest == GGUF_HEX and copied.name == "mine:latest"


def test_the_weights_option_reads_name_equals_digest() -> None:
    assert parse_weights(f"llama3.2=sha256:{GGUF_HEX}") == ("llama3.2", GGUF_HEX)
    assert parse_weights(f" m:q4 = {GGUF_HEX} ") == ("m:q4", GGUF_HEX)


@pytest.mark.parametrize("text", ["llama3.2", f"={GGUF_HEX}", "m=sha256:abc", f"m=md5:{GGUF_HEX}"])
def test_a_malformed_weights_option_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="NAME=sha256"):
        parse_weights(text)
