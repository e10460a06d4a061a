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
from backend.components.engines.actions import pick_names
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
