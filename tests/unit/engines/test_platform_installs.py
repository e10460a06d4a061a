"""Installing Ollama and LM Studio as a Mac and a Windows computer would, from a local stand-in
for their release sites: the bundled manifest of that platform (keys injected), real small
archives shaped as the releases are, the published checksums enforced, the files where detect
finds them; the Windows installer run through a fake runner that records the exact call."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import stat
import tarfile
import zipfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from backend.components.engines import install as installer
from backend.components.engines import manifest as manifests
from backend.components.engines import unpacking, updater
from backend.components.engines.commands import CommandResult
from backend.components.engines.detect import find_executable
from backend.components.engines.process import EngineLog
from backend.protocol import errors
from backend.protocol.types.base import EngineName
from backend.protocol.types.engines import InstallProgress
from tests.unit.components.local_server import served
from tests.unit.engines.installing import install_reporting
from tests.unit.engines.release_site import GithubReleases

MAC = ("darwin", "darwin/arm64")
WINDOWS = ("windows", "windows/amd64")
GITHUB = "https://github.com/ollama/ollama/releases"
LATEST = "https://api.github.com/repos/ollama/ollama/releases/latest"
LM_STUDIO = "https://lmstudio.ai/install"
POWERSHELL = ["powershell", "-NoProfile", "-NonInteractive", "-ExecutionPolicy", "Bypass"]
LM_STUDIO_ADVICE = "install LM Studio yourself from https://lmstudio.ai/download and PAIR will"


def _mac_tarball(version: str) -> bytes:
    """As ``ollama-darwin.tgz``: the universal CLI at the root, its runtime beside it."""
    members = {
        "ollama": (f"#!/bin/sh\necho ollama {version}\n".encode(), 0o755),
        "llama-server": (b"#!/bin/sh\n", 0o755),
        "libggml-base.dylib": (b"\xcf\xfa\xed\xfe", 0o644),
        "mlx_metal_v3/mlx.metallib": (b"MTLB", 0o644),
    }
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as bundle:
        for name, (data, mode) in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            bundle.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _windows_zip() -> bytes:
    """As ``ollama-windows-amd64.zip`` (Compress-Archive: no Unix modes), but ``ollama.exe``
    records 0755 as a zip made on Unix would, which Windows must not try to set."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as bundle:
        exe = zipfile.ZipInfo("ollama.exe")
        exe.create_system, exe.external_attr = 3, (stat.S_IFREG | 0o755) << 16
        bundle.writestr(exe, b"MZ")
        for name in ("lib/ollama/ggml-base.dll", "lib/ollama/cuda_v13/ggml-cuda.dll"):
            info = zipfile.ZipInfo(name)
            info.create_system, info.external_attr = 0, 0x20  # FILE_ATTRIBUTE_ARCHIVE
            bundle.writestr(info, b"MZ")
    return buffer.getvalue()


class Releases(GithubReleases):
    """Ollama's releases with a Mac and a Windows archive; ``sha256sum.txt`` also lists the
    Linux archive (a zero checksum: this site has none), as the real listing names every file."""

    def publish(self, tag: str) -> None:
        self.files[tag] = {
            "ollama-darwin.tgz": _mac_tarball(tag),
            "ollama-windows-amd64.zip": _windows_zip(),
        }
        self.latest = tag

    def checksums(self, tag: str) -> str:
        return "0" * 64 + "  ./ollama-linux-amd64.tar.zst\n" + super().checksums(tag)

    def manifest(self, name: str, keys: tuple[str, str]) -> manifests.Manifest:
        """The bundled manifest of ``name`` for ``keys``, its sites replaced by this one."""
        text = json.dumps(manifests.bundled_documents()[name])
        text = text.replace(LATEST, f"{self.url}/latest").replace(GITHUB, self.url)
        text = text.replace(LM_STUDIO, f"{self.url}/install")
        return manifests.build(json.loads(text), name, "archive", keys)


@pytest.fixture
async def site() -> AsyncIterator[tuple[Releases, aiohttp.ClientSession]]:
    releases = Releases()
    releases.publish("v0.33.3")

    async def install_ps1(_: web.Request) -> web.Response:
        return web.Response(text="Write-Output 'installing llmster'\n")

    app = web.Application()
    releases.add_routes(app, "/download")
    app.router.add_get("/install.ps1", install_ps1)
    async with served(app) as (url, session):
        releases.url = url
        yield releases, session


def _as_windows_unpacks(monkeypatch: pytest.MonkeyPatch) -> None:
    windows = unpacking.keeps_file_modes("win32")
    monkeypatch.setattr(unpacking, "keeps_file_modes", lambda: windows)


# -- Ollama on a Mac --------------------------------------------------------------------------


async def test_a_mac_gets_the_latest_cli_with_its_runtime_beside_it(
    tmp_path: Path, site: tuple[Releases, aiohttp.ClientSession]
) -> None:
    releases, session = site
    install_dir = tmp_path / "engines" / "ollama"
    manifest = releases.manifest("ollama", MAC)
    progress = await install_reporting(manifest, session, install_dir)
    assert os.access(install_dir / "ollama", os.X_OK), "the executable bit is kept"
    assert (install_dir / "libggml-base.dylib").is_file()
    assert (install_dir / "mlx_metal_v3" / "mlx.metallib").is_file()
    values = {"install_dir": str(install_dir)}
    found = find_executable(manifest.detect, values, system_platform="darwin")
    assert found == install_dir / "ollama"
    assert releases.requests == [
        "/latest",
        "/download/v0.33.3/sha256sum.txt",
        "/download/v0.33.3/ollama-darwin.tgz",
    ]
    stages = [p.stage for p in progress]
    assert stages[0] == "checking for the latest version" and stages[-1] == "installed"
    assert "unpacking" in stages
    assert sorted(p.name for p in install_dir.parent.iterdir()) == ["ollama"], "no download"


async def test_a_mac_updates_from_the_next_release_checked_the_same_way(
    tmp_path: Path, site: tuple[Releases, aiohttp.ClientSession]
) -> None:
    releases, session = site
    install_dir = tmp_path / "engines" / "ollama"
    manifest = releases.manifest("ollama", MAC)
    await install_reporting(manifest, session, install_dir)
    releases.publish("v0.33.4")
    values = await updater.stage(
        manifest,
        "0.33.4",
        install_dir=install_dir,
        binary=install_dir / "ollama",
        session=session,
        values={},
        output=EngineLog(),
        report=installer.Reporter(EngineName("ollama"), lambda _: None),
    )
    await updater.replace(manifest, install_dir=install_dir, values=values, output=EngineLog())
    assert b"v0.33.4" in (install_dir / "ollama").read_bytes()
    assert "/download/v0.33.4/sha256sum.txt" in releases.requests
    await updater.discard(install_dir)


async def test_a_pinned_checksum_asks_for_no_release_listing(
    tmp_path: Path, site: tuple[Releases, aiohttp.ClientSession]
) -> None:
    releases, session = site
    tarball = releases.files["v0.33.3"]["ollama-darwin.tgz"]
    pinned = {
        "url": f"{releases.url}/download/v0.33.3/ollama-darwin.tgz",
        "sha256": hashlib.sha256(tarball).hexdigest(),
    }
    document = manifests.merge_override(
        manifests.bundled_documents()["ollama"], {"install": pinned}, "override", "archive", MAC
    )
    manifest = manifests.build(document, "override", "archive", MAC)
    assert manifest.install is not None and manifest.install.sha256_url is not None
    await install_reporting(manifest, session, tmp_path / "ollama")
    assert releases.requests == ["/download/v0.33.3/ollama-darwin.tgz"]


# -- Ollama on Windows ------------------------------------------------------------------------


async def test_windows_gets_the_standalone_zip_with_its_lib_folder_and_sets_no_modes(
    tmp_path: Path,
    site: tuple[Releases, aiohttp.ClientSession],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    releases, session = site
    _as_windows_unpacks(monkeypatch)
    install_dir = tmp_path / "engines" / "ollama"
    manifest = releases.manifest("ollama", WINDOWS)
    await install_reporting(manifest, session, install_dir)
    exe = install_dir / "ollama.exe"
    assert (install_dir / "lib" / "ollama" / "cuda_v13" / "ggml-cuda.dll").is_file()
    assert (install_dir / "lib" / "ollama" / "ggml-base.dll").is_file()
    assert not os.access(exe, os.X_OK), "no chmod on Windows, whatever the zip records"
    values = {"install_dir": str(install_dir)}
    assert find_executable(manifest.detect, values, system_platform="win32") == exe
    assert "/download/v0.33.3/ollama-windows-amd64.zip" in releases.requests


@pytest.mark.parametrize(
    ("keys", "name"), [(MAC, "ollama-darwin.tgz"), (WINDOWS, "ollama-windows-amd64.zip")]
)
@pytest.mark.parametrize(
    ("listed", "error"),
    [("f" * 64, "does not match its pinned checksum"), ("", "lists no SHA-256 checksum for")],
)
async def test_a_file_the_release_checksums_do_not_vouch_for_installs_nothing(
    tmp_path: Path,
    site: tuple[Releases, aiohttp.ClientSession],
    keys: tuple[str, str],
    name: str,
    listed: str,
    error: str,
) -> None:
    releases, session = site
    releases.listed[name] = listed
    engines = tmp_path / "engines"
    engines.mkdir()
    with pytest.raises(errors.InternalError, match=error):
        await install_reporting(releases.manifest("ollama", keys), session, engines / "ollama")
    assert list(engines.iterdir()) == []


async def test_a_machine_without_a_release_is_told_where_to_get_ollama(
    tmp_path: Path, site: tuple[Releases, aiohttp.ClientSession]
) -> None:
    releases, session = site
    manifest = releases.manifest("ollama", ("windows", "windows/x86"))
    with pytest.raises(errors.InvalidParams) as raised:
        await install_reporting(manifest, session, tmp_path / "ollama")
    assert raised.value.message == (
        "Ollama has no installer PAIR can run on this computer; install it from "
        "https://ollama.com/download, then PAIR will find it"
    )


# -- LM Studio on Windows ---------------------------------------------------------------------


@dataclass
class FakeRunner:
    """Records each command and what the file it runs held; answers ``result``'s code."""

    code: int = 0
    lines: list[str] = field(default_factory=list)
    started: bool = True
    calls: list[list[str]] = field(default_factory=list)
    scripts: list[bytes] = field(default_factory=list)

    async def __call__(
        self, argv: list[str], *, timeout: float, output: EngineLog | None = None
    ) -> CommandResult:
        self.calls.append(argv)
        self.scripts.append(await asyncio.to_thread(Path(argv[-1]).read_bytes))
        return CommandResult(argv, self.code, self.lines, started=self.started)


async def test_windows_runs_llmsters_install_ps1_with_powershell_and_removes_it(
    tmp_path: Path, site: tuple[Releases, aiohttp.ClientSession]
) -> None:
    releases, session = site
    runner = FakeRunner()
    install_dir = tmp_path / "engines" / "lmstudio"
    progress = await install_reporting(
        releases.manifest("lmstudio", WINDOWS), session, install_dir, run=runner
    )
    (argv,) = runner.calls
    script = install_dir.parent / "lmstudio.download.ps1"
    assert argv == [*POWERSHELL, "-File", str(script)]
    assert runner.scripts == [b"Write-Output 'installing llmster'\n"]
    assert not script.exists(), "the installer is removed once it ran"
    assert [p.stage for p in progress][-2:] == ["running the installer", "installed"]


@pytest.mark.parametrize(
    ("runner", "said"),
    [
        (FakeRunner(code=1, lines=["Access to the path is denied."]), "exited with 1: Access"),
        (
            FakeRunner(code=127, lines=["cannot run powershell: not found"], started=False),
            "cannot run powershell",
        ),
    ],
)
async def test_an_installer_that_fails_says_how_to_install_lm_studio_by_hand(
    tmp_path: Path, site: tuple[Releases, aiohttp.ClientSession], runner: FakeRunner, said: str
) -> None:
    releases, session = site
    runner.calls.clear()
    install_dir = tmp_path / "engines" / "lmstudio"
    progress: list[InstallProgress] = []
    manifest = releases.manifest("lmstudio", WINDOWS)
    with pytest.raises(errors.InternalError) as raised:
        await install_reporting(manifest, session, install_dir, run=runner, progress=progress)
    message = raised.value.message
    assert message.startswith("the installer failed: `powershell -NoProfile")
    assert said in message and message.endswith(f"{LM_STUDIO_ADVICE} find it")
    assert progress[-1].error == message and progress[-1].done
    assert list(install_dir.parent.iterdir()) == [], "nor is a failed installer left behind"
