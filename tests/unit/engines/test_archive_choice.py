"""The frozen app's llama.cpp install takes the release archive for this computer's GPU, with
the runtime it needs, and records the backend it chose."""

from __future__ import annotations

import hashlib
import io
import json
import stat
import zipfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from backend.components.engines import archive_choice, updater
from backend.components.engines import install as installer
from backend.components.engines import manifest as manifests
from backend.components.engines.accel import DetectedGpu
from backend.components.engines.archive_choice import (
    accelerated_archive,
    detected_gpus,
    merge_folder,
    takes_accelerated_archive,
)
from backend.components.engines.backend_label import ARCHIVE_BACKEND_FILE, backend_label
from backend.components.engines.manifest import build, deep_merge, merge_override
from backend.components.engines.process import EngineLog
from backend.components.engines.templating import expand
from backend.components.nodeinfo.gpus import NvidiaReader
from backend.protocol import errors
from backend.protocol.types.base import EngineName
from backend.protocol.types.engines import InstallProgress
from tests.unit.components.local_server import served

GIB = 1024**3
RTX = DetectedGpu("nvidia", "GeForce RTX 4090", 24 * GIB)
RADEON = DetectedGpu("amd", "Radeon RX 7900 XTX", 24 * GIB)
WINDOWS = ("windows", "windows/amd64")
CUDA_ASSET = "llama-b7-bin-win-cuda-12.4-x64.zip"
CUDA_RUNTIME = "cudart-llama-bin-win-cuda-12.4-x64.zip"


def _archive_manifest(change: dict[str, Any] | None = None) -> manifests.Manifest:
    base = manifests.bundled_documents()["llamacpp"]
    return build(merge_override(base, change or {}, "test", "archive"), "test", "archive")


def _asset(keys: tuple[str, str], gpus: list[DetectedGpu]) -> tuple[str, str | None, str]:
    choice = accelerated_archive(_archive_manifest(), gpus, keys)
    assert choice is not None
    return expand(choice.asset, {"version": "7"}), choice.runtime_asset, choice.backend


@pytest.mark.parametrize(
    ("keys", "gpus", "chosen"),
    [
        (WINDOWS, [RTX], (CUDA_ASSET, CUDA_RUNTIME, "CUDA 12.4")),
        (WINDOWS, [RADEON], ("llama-b7-bin-win-vulkan-x64.zip", None, "Vulkan")),
        (WINDOWS, [], ("llama-b7-bin-win-cpu-x64.zip", None, "CPU")),
        (
            ("linux", "linux/x86_64"),
            [RTX],
            ("llama-b7-bin-ubuntu-vulkan-x64.tar.gz", None, "Vulkan"),
        ),
        (("linux", "linux/x86_64"), [], ("llama-b7-bin-ubuntu-x64.tar.gz", None, "CPU")),
        (("darwin", "darwin/arm64"), [], ("llama-b7-bin-macos-arm64.tar.gz", None, "Metal")),
        (("darwin", "darwin/x86_64"), [], ("llama-b7-bin-macos-x64.tar.gz", None, "CPU")),
    ],
)
def test_each_computer_gets_the_archive_of_its_accelerator(
    keys: tuple[str, str], gpus: list[DetectedGpu], chosen: tuple[str, str | None, str]
) -> None:
    assert _asset(keys, gpus) == chosen


def test_without_a_gpu_the_manifests_own_archive_is_kept() -> None:
    custom = {"methods": {"archive": {"assets": {"linux/x86_64": "mine-{version}.tgz"}}}}
    choice = accelerated_archive(_archive_manifest(custom), [], ("linux", "linux/x86_64"))
    assert choice is not None and (choice.asset, choice.backend) == ("mine-{version}.tgz", "CPU")


def test_a_platform_without_an_archive_has_no_choice() -> None:
    assert accelerated_archive(_archive_manifest(), [RTX], ("linux", "linux/riscv64")) is None


def test_only_llama_cpps_archive_install_is_chosen_by_gpu() -> None:
    assert takes_accelerated_archive(_archive_manifest())
    base = manifests.bundled_documents()
    assert not takes_accelerated_archive(build(base["llamacpp"], "test", "pip"))
    assert not takes_accelerated_archive(build(base["ollama"], "test", "archive"))


class FakeNvml:
    """NVML with one GPU."""

    def __init__(self) -> None:
        self.shut_down = False

    def nvmlInit(self) -> None:
        return None

    def nvmlShutdown(self) -> None:
        self.shut_down = True

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, _: int) -> bytes:
        return b"NVIDIA GeForce RTX 4090"

    def nvmlDeviceGetMemoryInfo(self, _: int) -> Any:
        return type("Memory", (), {"total": 24 * GIB, "used": GIB})()

    def nvmlDeviceGetUtilizationRates(self, _: int) -> Any:
        return type("Rates", (), {"gpu": 3})()


def test_the_gpus_are_the_ones_node_info_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nvml = FakeNvml()
    monkeypatch.setattr(archive_choice, "NvidiaReader", lambda: NvidiaReader(nvml))
    device = tmp_path / "card0" / "device"
    device.mkdir(parents=True)
    (device / "vendor").write_text("0x1002\n")
    (device / "mem_info_vram_total").write_text(f"{16 * GIB}\n")
    assert detected_gpus(tmp_path) == [
        DetectedGpu("nvidia", "NVIDIA GeForce RTX 4090", 24 * GIB),
        DetectedGpu("amd", "", 16 * GIB),
    ]
    assert nvml.shut_down


def test_merging_a_runtime_replaces_files_of_the_same_name(tmp_path: Path) -> None:
    target, source = tmp_path / "install", tmp_path / "runtime"
    (target / "lib").mkdir(parents=True)
    (target / "llama-server").write_text("server")
    (target / "cudart64_12.dll").write_text("old")
    (source / "lib").mkdir(parents=True)
    (source / "cudart64_12.dll").write_text("new")
    (source / "lib" / "cublas64_12.dll").write_text("blas")
    merge_folder(source, target)
    assert (target / "cudart64_12.dll").read_text() == "new"
    assert (target / "llama-server").read_text() == "server"
    assert [p.name for p in (target / "lib").iterdir()] == ["cublas64_12.dll"]
    assert not source.exists()


# -- installing the CUDA build ------------------------------------------------------------------


def _zip(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as bundle:
        for name, data in members.items():
            info = zipfile.ZipInfo(name)
            info.create_system, info.external_attr = 3, (stat.S_IFREG | 0o755) << 16
            bundle.writestr(info, data)
    return buffer.getvalue()


@pytest.fixture
async def cuda_site() -> AsyncIterator[tuple[str, aiohttp.ClientSession, dict[str, bytes]]]:
    """llama.cpp's release ``b7`` with the CUDA build and its runtime; the test may change a
    file after its checksum was published."""
    files = {
        CUDA_ASSET: _zip({"llama-server": b"#!/bin/sh\n", "ggml-cuda.dll": b"cuda"}),
        CUDA_RUNTIME: _zip({"cudart64_12.dll": b"runtime", "cublas64_12.dll": b"blas"}),
    }
    assets = [
        {"name": name, "digest": f"sha256:{hashlib.sha256(data).hexdigest()}"}
        for name, data in files.items()
    ]

    async def latest(_: web.Request) -> web.Response:
        return web.json_response({"tag_name": "b7"})

    async def release(_: web.Request) -> web.Response:
        return web.json_response({"tag_name": "b7", "assets": assets})

    async def download(request: web.Request) -> web.Response:
        data = files.get(request.match_info["name"])
        return web.Response(body=data) if data is not None else web.Response(status=404)

    app = web.Application()
    app.router.add_get("/latest", latest)
    app.router.add_get("/tags/b7", release)
    app.router.add_get("/b7/{name}", download)
    async with served(app) as (url, session):
        yield url, session, files


def _windows_site_manifest(url: str) -> manifests.Manifest:
    release = {"url": url + "/b{version}/{asset}", "sha256_url": url + "/tags/b{version}"}
    this = manifests.platform_keys()[1]
    block = {"install": release, "update": release, "latest": {"url": url + "/latest"}}
    document = deep_merge(
        manifests.bundled_documents()["llamacpp"], {"methods": {"archive": block}}
    )
    # This computer's CPU archive (never fetched) and Windows's, which the CUDA build replaces.
    windows_cpu = "llama-b{version}-bin-win-cpu-x64.zip"
    document["methods"]["archive"]["assets"] = {this: "cpu-b{version}.zip", WINDOWS[1]: windows_cpu}
    return build(document, "test", "archive")


async def _install_on_windows(
    url: str, session: aiohttp.ClientSession, install_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> list[InstallProgress]:
    monkeypatch.setattr(archive_choice, "platform_keys", lambda: WINDOWS)
    progress: list[InstallProgress] = []
    await installer.install(
        _windows_site_manifest(url),
        install_dir=install_dir,
        session=session,
        values={},
        output=EngineLog(),
        progress=progress.append,
        gpus=[RTX],
    )
    return progress


async def test_windows_with_an_nvidia_gpu_gets_the_cuda_build_with_its_runtime(
    tmp_path: Path,
    cuda_site: tuple[str, aiohttp.ClientSession, dict[str, bytes]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, session, _ = cuda_site
    install_dir = tmp_path / "engines" / "llamacpp"
    progress = await _install_on_windows(url, session, install_dir, monkeypatch)
    assert sorted(p.name for p in install_dir.iterdir()) == [
        "cublas64_12.dll",
        "cudart64_12.dll",
        "ggml-cuda.dll",
        "llama-server",
        ARCHIVE_BACKEND_FILE,
    ]
    assert json.loads((install_dir / ARCHIVE_BACKEND_FILE).read_text()) == {"backend": "CUDA 12.4"}
    backend_label.cache_clear()
    assert backend_label(install_dir / "llama-server") == "CUDA 12.4"
    assert progress[-1].stage == "installed"
    assert sorted(p.name for p in install_dir.parent.iterdir()) == ["llamacpp"]


async def test_a_runtime_that_cannot_be_had_leaves_nothing_installed(
    tmp_path: Path,
    cuda_site: tuple[str, aiohttp.ClientSession, dict[str, bytes]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, session, files = cuda_site
    files[CUDA_RUNTIME] = b"not the published runtime"
    install_dir = tmp_path / "engines" / "llamacpp"
    with pytest.raises(errors.InternalError, match="does not match its pinned checksum"):
        await _install_on_windows(url, session, install_dir, monkeypatch)
    assert list(install_dir.parent.iterdir()) == []


async def test_an_update_keeps_the_build_of_this_computers_gpu(
    tmp_path: Path,
    cuda_site: tuple[str, aiohttp.ClientSession, dict[str, bytes]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, session, _ = cuda_site
    install_dir = tmp_path / "engines" / "llamacpp"
    await _install_on_windows(url, session, install_dir, monkeypatch)
    await updater.stage(
        _windows_site_manifest(url),
        "7",
        install_dir=install_dir,
        binary=install_dir / "llama-server",
        session=session,
        values={},
        output=EngineLog(),
        report=installer.Reporter(EngineName("llamacpp"), lambda _: None),
        gpus=[RTX],
    )
    staged = updater.UpdatePaths(install_dir).staging
    assert {"cudart64_12.dll", "ggml-cuda.dll", ARCHIVE_BACKEND_FILE} <= {
        p.name for p in staged.iterdir()
    }
    assert json.loads((staged / ARCHIVE_BACKEND_FILE).read_text()) == {"backend": "CUDA 12.4"}
    await updater.discard(install_dir)
