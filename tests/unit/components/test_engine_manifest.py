"""Manifests: deep merge, platform blocks, validation rules, placeholders, result picking."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from backend.components.engines import manifest as manifests
from backend.components.engines.actions import pick_listing, pick_names, pick_sizes
from backend.components.engines.manifest import ManifestError, ResultSpec, build, deep_merge
from backend.components.engines.process import reap_orphan
from backend.components.engines.templating import expand, expand_json


def test_bundled_manifests_load_with_relocated_loopback_ports() -> None:
    loaded = manifests.load_all(Path("/nonexistent"))
    assert loaded.problems == {}
    ports = {name: m.runtime.port for name, m in loaded.manifests.items()}
    assert ports == {"ollama": 11435, "lmstudio": 1235, "llamacpp": 8081}
    assert all(m.runtime.bind == "127.0.0.1" for m in loaded.manifests.values())
    assert loaded.manifests["lmstudio"].runtime.mode == "command"


def test_deep_merge_merges_objects_and_replaces_arrays_and_scalars() -> None:
    base = {"runtime": {"port": 1, "args": ["a", "b"], "env": {"X": "1"}}, "name": "n"}
    merged = deep_merge(base, {"runtime": {"args": ["c"], "env": {"Y": "2"}}, "name": "m"})
    assert merged == {
        "runtime": {"port": 1, "args": ["c"], "env": {"X": "1", "Y": "2"}},
        "name": "m",
    }
    assert base["runtime"]["args"] == ["a", "b"], "inputs are not mutated"


def test_platform_block_applies_to_this_platform_only() -> None:
    document = manifests.bundled_documents()["ollama"]
    _, specific = manifests.platform_keys()
    document = deep_merge(
        document,
        {
            "platforms": {
                specific: {"runtime": {"port": 40001}},
                "plan9": {"runtime": {"port": 40002}},
            }
        },
    )
    assert build(document, "test").runtime.port == 40001


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"runtime": {"bind": "0.0.0.0"}}, "not a loopback address"),
        ({"runtime": {"bind": "192.168.1.5"}}, "not a loopback address"),
        ({"runtime": {"port": 0}}, "not a TCP port"),
        ({"runtime": {"port": "x"}}, "Expected `int`"),
        ({"manifest_version": 2}, "manifest_version"),
        ({"actions": {"x": {"cmd": ["a"], "remove_path": "b"}}}, "exactly one of"),
        ({"runtime": {"surprise": True}}, "unknown field"),
    ],
)
def test_invalid_manifests_are_refused_with_the_reason(
    change: dict[str, object], needle: str
) -> None:
    document = deep_merge(manifests.bundled_documents()["ollama"], change)
    with pytest.raises(ManifestError, match=needle):
        build(document, "override")


def test_a_broken_override_keeps_the_bundled_manifest(tmp_path: Path) -> None:
    (tmp_path / "ollama.json").write_text("[1, 2]")
    (tmp_path / "llamacpp.json").write_text(json.dumps({"runtime": {"port": 9999}}))
    loaded = manifests.load_all(tmp_path)
    assert "top level must be an object" in loaded.problems["ollama"]
    assert loaded.manifests["ollama"].runtime.port == 11435
    assert loaded.manifests["llamacpp"].runtime.port == 9999


def test_placeholders_expand_and_unknown_ones_are_errors() -> None:
    assert expand("{host}:{port}", {"host": "127.0.0.1", "port": "5"}) == "127.0.0.1:5"
    assert expand_json({"model": "{model}", "n": 1, "l": ["{model}"]}, {"model": "m"}) == {
        "model": "m",
        "n": 1,
        "l": ["m"],
    }
    with pytest.raises(ManifestError, match="unknown placeholder"):
        expand("{nope}", {})


def test_pick_names_reads_lists_and_respects_nonempty() -> None:
    document = {
        "models": [
            {"key": "b", "loaded_instances": [{"id": "b"}]},
            {"key": "a", "loaded_instances": []},
            {"key": 3},
            "junk",
        ]
    }
    assert pick_names(document, ResultSpec(array="models", field="key")) == ["a", "b"]
    loaded = ResultSpec(array="models", field="key", nonempty="loaded_instances")
    assert pick_names(document, loaded) == ["b"]
    assert pick_names({"models": None}, loaded) == []
    assert pick_names("garbage", loaded) == []


def test_pick_sizes_reads_whole_byte_counts_of_picked_models_only() -> None:
    document = {
        "models": [
            {"key": "b", "size_bytes": 2_019_393_189, "loaded_instances": [{"id": "b"}]},
            {"key": "a", "size_bytes": 7, "loaded_instances": []},
            {"key": "a", "size_bytes": 8},  # a repeated name keeps its first size
            {"key": "no-size"},
            {"key": "text", "size_bytes": "4.7 GB"},
            {"key": "flag", "size_bytes": True},
            {"key": "negative", "size_bytes": -1},
            {"key": "fraction", "size_bytes": 1.5},
            {"key": 3, "size_bytes": 9},
            "junk",
        ]
    }
    spec = ResultSpec(array="models", field="key", size="size_bytes")
    assert pick_sizes(document, spec) == {"a": 7, "b": 2_019_393_189}
    loaded = ResultSpec(array="models", field="key", nonempty="loaded_instances", size="size_bytes")
    assert pick_sizes(document, loaded) == {"b": 2_019_393_189}
    assert pick_sizes(document, ResultSpec(array="models", field="key")) == {}, "no size member"
    assert pick_sizes("garbage", spec) == {}
    listing = pick_listing(document, spec)
    assert listing.names == ["a", "b", "flag", "fraction", "negative", "no-size", "text"]
    assert listing.sizes == {"a": 7, "b": 2_019_393_189}


def test_bundled_listings_read_sizes_where_the_engine_reports_them() -> None:
    loaded = manifests.load_all(Path("/nonexistent")).manifests
    sizes = {}
    for name, manifest in loaded.items():
        if manifest.model_store is not None:
            continue  # PAIR lists the files itself, with their sizes
        result = manifest.actions["list_models"].result
        assert result is not None
        sizes[name] = result.size
    assert sizes == {"ollama": "size", "lmstudio": "size_bytes"}
    assert "list_models" not in loaded["llamacpp"].actions


def test_the_size_member_is_optional_and_unknown_result_members_are_still_refused() -> None:
    document = manifests.bundled_documents()["ollama"]  # a fresh copy on every call
    without_size = manifests.bundled_documents()["ollama"]
    without_size["actions"]["list_models"]["result"] = {"array": "models", "field": "name"}
    listing = build(without_size, "older manifest").actions["list_models"].result
    assert listing is not None and listing.size is None
    typo = deep_merge(document, {"actions": {"list_models": {"result": {"sise": "size"}}}})
    with pytest.raises(ManifestError, match="sise"):
        build(typo, "typo")


def test_an_ollama_tags_answer_gives_names_and_sizes() -> None:
    loaded = manifests.load_all(Path("/nonexistent")).manifests
    spec = loaded["ollama"].actions["list_models"].result
    assert spec is not None
    tags = {
        "models": [
            {"name": "llama3:8b", "model": "llama3:8b", "size": 4_661_224_676, "digest": "x"},
            {"name": "tinyllama:latest", "model": "tinyllama:latest", "size": 637_700_138},
        ]
    }
    listing = pick_listing(tags, spec)
    assert listing.names == ["llama3:8b", "tinyllama:latest"]
    assert listing.sizes == {"llama3:8b": 4_661_224_676, "tinyllama:latest": 637_700_138}


def test_reaper_kills_only_the_process_whose_start_time_matches() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
    )
    try:
        created = psutil.Process(child.pid).create_time()
        assert reap_orphan(child.pid, created + 10) is False, "a recycled PID is left alone"
        assert child.poll() is None
        assert reap_orphan(child.pid, created) is True
        child.wait(10)
        assert child.returncode is not None
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    deadline = time.monotonic() + 1
    while time.monotonic() < deadline and psutil.pid_exists(child.pid):
        time.sleep(0.01)
