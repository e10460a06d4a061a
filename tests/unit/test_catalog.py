"""The model hub's catalogue: the shipped file validates, broken files are refused, search."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.catalog import CatalogError, format_size, load_catalog, parse_catalog, search


def entry(**changes: Any) -> dict[str, Any]:
    base = {
        "id": "tiny-1b", "name": "Tiny 1B", "publisher": "Someone",
        "description": "A tiny model for tests.", "tags": ["small"],
        "size_bytes": 1_000_000_000, "engines": {"ollama": "tiny:1b"},
    }  # fmt: skip
    return {**base, **changes}


def document(*entries: dict[str, Any], version: Any = 1) -> bytes:
    return json.dumps({"version": version, "models": list(entries)}).encode()


def test_the_shipped_catalogue_loads_and_is_curated() -> None:
    catalog = load_catalog()
    assert catalog.error is None
    assert 20 <= len(catalog.entries) <= 30
    assert len({item.id for item in catalog.entries}) == len(catalog.entries)
    for item in catalog.entries:
        ollama = item.engines.get("ollama")
        assert ollama is None or ":" in ollama, f"{item.id}: give Ollama tags explicitly"
        lmstudio = item.engines.get("lmstudio")
        assert lmstudio is None or "/" in lmstudio, f"{item.id}: LM Studio keys are publisher/name"
        assert 100_000_000 <= item.size_bytes <= 40_000_000_000, item.id


def test_a_valid_document_parses() -> None:
    (parsed,) = parse_catalog(document(entry(engines={"ollama": "a:1b", "lmstudio": "x/a"})))
    assert parsed.engines == {"ollama": "a:1b", "lmstudio": "x/a"}
    assert parsed.tags == ("small",)
    (untagged,) = parse_catalog(document({k: v for k, v in entry().items() if k != "tags"}))
    assert untagged.tags == ()


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"{not json", "malformed"),
        (document(entry(), version=2), "version"),
        (document(entry(size_bytes=0)), "size_bytes"),
        (document(entry(engines={})), "engines"),
        (document(entry(engines={"vllm": "x"})), "engines"),
        (document(entry(engines={"ollama": ""})), "engines"),
        (document(entry(colour="red")), "colour"),
        (document(entry(id="Bad Id")), "id"),
        (document({k: v for k, v in entry().items() if k != "name"}), "name"),
        (document(entry(), entry()), "appears twice"),
    ],
)
def test_a_broken_document_is_refused_with_a_reason(data: bytes, reason: str) -> None:
    with pytest.raises(CatalogError, match=reason):
        parse_catalog(data)


def test_a_broken_file_gives_an_empty_catalogue_and_a_message(tmp_path: Path) -> None:
    path = tmp_path / "catalog.json"
    path.write_bytes(document(entry(size_bytes=-5)))
    catalog = load_catalog(path)
    assert catalog.entries == ()
    assert catalog.error is not None
    assert str(path) in catalog.error and "size_bytes" in catalog.error
    missing = load_catalog(tmp_path / "absent.json")
    assert missing.entries == () and missing.error is not None and "absent.json" in missing.error


def test_search_matches_every_word_in_any_field_ignoring_case() -> None:
    items = parse_catalog(
        document(
            entry(id="a", name="Qwen3 8B", description="Reasoning model.", tags=["coding"]),
            entry(id="b", name="Gemma 3 4B", description="Reads images.", tags=["vision"]),
            entry(id="c", name="Other", publisher="Qwen team", engines={"ollama": "zz:1b"}),
        )
    )
    assert [i.id for i in search(items, "")] == ["a", "b", "c"]
    assert [i.id for i in search(items, "QWEN")] == ["a", "c"]
    assert [i.id for i in search(items, "coding qwen")] == ["a"]
    assert [i.id for i in search(items, "images")] == ["b"]
    assert [i.id for i in search(items, "zz:1b")] == ["c"]
    assert search(items, "qwen vision") == []


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (None, "—"),
        (999, "999 B"),
        (523_000_000, "523 MB"),
        (1_300_000_000, "1.3 GB"),
        (19_000_000_000, "19 GB"),
        (2_500_000_000_000, "2.5 TB"),
    ],
)
def test_sizes_read_like_the_engines_print_them(size: int | None, text: str) -> None:
    assert format_size(size) == text


@pytest.mark.parametrize(
    "address",
    ["http://example.org/m.gguf", "https://example.org/m.bin", "qwen2.5:0.5b", "https:///m.gguf"],
)
def test_a_llamacpp_entry_must_be_the_https_address_of_a_gguf_file(address: str) -> None:
    with pytest.raises(CatalogError, match="llamacpp must be the https address"):
        parse_catalog(document(entry(engines={"llamacpp": address})))
    url = "https://huggingface.co/o/r/resolve/main/m-Q4_K_M.gguf"
    (parsed,) = parse_catalog(document(entry(engines={"llamacpp": url})))
    assert parsed.engines == {"llamacpp": url}
