"""Model names and derived details of the engine emulators (standing in for installed models)."""

from __future__ import annotations

from backend.devtools.emulators.catalog import (
    ModelName,
    is_known_family,
    lmstudio_catalog,
    ollama_catalog,
    parse_model_name,
    spec_for,
)


def test_emulator_parses_ollama_names_with_defaults() -> None:
    assert parse_model_name("llama3.2") == ModelName(
        "registry.ollama.ai", "library", "llama3.2", "latest"
    )
    assert parse_model_name("llama3.2").display == "llama3.2:latest"
    assert parse_model_name("user/model:q4").display == "user/model:q4"
    named = parse_model_name("hf.co/bartowski/Llama-3.2-1B-GGUF:Q4_K_M")
    assert (named.host, named.namespace, named.tag) == ("hf.co", "bartowski", "Q4_K_M")


def test_emulator_derives_plausible_details_deterministically_from_the_name() -> None:
    spec = spec_for("qwen2.5:0.5b", 0)
    assert spec == spec_for("qwen2.5:0.5b", 0)
    assert (spec.family, spec.parameter_size, spec.quantization) == ("qwen2", "500M", "Q4_K_M")
    assert len(spec.digest) == 64 and spec.size > 250_000_000
    assert spec_for("llama3.1:8b-instruct-q8_0", 0).quantization == "Q8_0"
    assert spec_for("llama3.2:latest", 0).parameter_size == "3.2B"
    embedder = spec_for("nomic-embed-text:latest", 0)
    assert embedder.is_embedding and embedder.quantization == "F16"
    assert spec_for("qwen2.5-7b-instruct", 0).params_string == "7B"
    assert is_known_family("gemma-3-270m-it") and not is_known_family("zzz")


def test_emulator_ollama_catalog_lookup_is_case_insensitive_with_latest_implied() -> None:
    catalog = ollama_catalog(("llama3.2", "tinyllama:1.1b"), 10**18)
    assert [spec.name for spec in catalog.newest_first()] == ["llama3.2:latest", "tinyllama:1.1b"]
    found = catalog.find("LLaMA3.2")
    assert found is not None and found.name == "llama3.2:latest"
    assert catalog.remove("llama3.2:latest") and catalog.find("llama3.2") is None
    keys = lmstudio_catalog(("Qwen2.5-7B-Instruct",), 0)
    assert keys.find("qwen2.5-7b-instruct") is not None
