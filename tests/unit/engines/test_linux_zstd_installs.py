"""Installing and updating Ollama as Linux does, from a local stand-in for ollama.com and its
GitHub releases: the bundled manifest's Linux blocks (keys injected), real small ``.tar.zst``
archives shaped as Ollama's (``bin/ollama``, ``lib/ollama/…``), the release's
``sha256sum.txt`` enforced for updates, ``bin/ollama`` where detect finds it."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from backend.components.engines import install as installer
from backend.components.engines import manifest as manifests
from backend.components.engines import updater
from backend.components.engines.detect import find_executable
from backend.components.engines.process import EngineLog
from backend.protocol import errors
from backend.protocol.types.base import EngineName
from backend.protocol.types.engines import InstallProgress
from tests.unit.components.local_server import served
from tests.unit.engines.installing import install_reporting
from tests.unit.engines.release_site import GithubReleases
from tests.unit.engines.tar_zst import Member, tar_zst

LINUX_X64 = ("linux", "linux/x86_64")
LINUX_ARM = ("linux", "linux/aarch64")
DOWNLOADS = "https://ollama.com/download"
GITHUB = "https://github.com/ollama/ollama/releases"
LATEST = "https://api.github.com/repos/ollama/ollama/releases/latest"


def _ollama(version: str) -> dict[str, Member]:
    """As ``ollama-linux-<arch>.tar.zst``: ``bin/ollama`` and its libraries under ``lib/``."""
    return {
        "bin/ollama": (f"#!/bin/sh\necho ollama version is {version}\n".encode(), 0o755),
        "lib/ollama/libggml-base.so": (b"\x7fELF", 0o644),
        "lib/ollama/cuda_v13/libggml-cuda.so": (b"\x7fELF", 0o644),
        "lib/ollama/cuda_v13/libcudart.so.13": "libggml-cuda.so",
    }


class Site(GithubReleases):
    """ollama.com's current downloads (``current``) and the GitHub releases of Linux archives."""

    def __init__(self) -> None:
        super().__init__()
        self.current: dict[str, bytes] = {}

    def publish(self, tag: str, archive: bytes | None = None) -> None:
        """Release ``tag`` for both machines (``archive`` in place of the real one)."""
        files = {
            f"ollama-linux-{arch}.tar.zst": archive or tar_zst(_ollama(tag))
            for arch in ("amd64", "arm64")
        }
        self.files[tag], self.current, self.latest = files, files, tag

    def manifest(self, keys: tuple[str, str]) -> manifests.Manifest:
        """The bundled Ollama manifest for ``keys``, its sites replaced by this one."""
        text = json.dumps(manifests.bundled_documents()["ollama"])
        text = text.replace(LATEST, f"{self.url}/latest").replace(GITHUB, f"{self.url}/github")
        text = text.replace(DOWNLOADS, f"{self.url}/download")
        return manifests.build(json.loads(text), "ollama", "archive", keys)


@pytest.fixture
async def site() -> AsyncIterator[tuple[Site, aiohttp.ClientSession]]:
    releases = Site()
    releases.publish("v0.14.2")

    async def current(request: web.Request) -> web.Response:
        releases.requests.append(request.path)
        data = releases.current.get(request.match_info["name"])
        return web.Response(body=data) if data is not None else web.Response(status=404)

    app = web.Application()
    releases.add_routes(app, "/github/download")
    app.router.add_get("/download/{name}", current)
    async with served(app) as (url, session):
        releases.url = url
        yield releases, session


@pytest.mark.parametrize(("keys", "arch"), [(LINUX_X64, "amd64"), (LINUX_ARM, "arm64")])
async def test_linux_installs_the_current_tar_zst_where_detect_finds_it(
    tmp_path: Path, site: tuple[Site, aiohttp.ClientSession], keys: tuple[str, str], arch: str
) -> None:
    releases, session = site
    install_dir = tmp_path / "engines" / "ollama"
    manifest = releases.manifest(keys)
    progress = await install_reporting(manifest, session, install_dir)
    assert releases.requests == [f"/download/ollama-linux-{arch}.tar.zst"]
    binary = install_dir / "bin" / "ollama"
    assert os.access(binary, os.X_OK), "the executable bit is kept"
    assert (install_dir / "lib" / "ollama" / "cuda_v13" / "libcudart.so.13").is_symlink()
    values = {"install_dir": str(install_dir)}
    detect = [c for c in manifest.detect if c.which is None]  # not an ollama on this PATH
    assert find_executable(detect, values, system_platform="linux") == binary
    assert [p.stage for p in progress][-2:] == ["unpacking", "installed"]
    assert sorted(p.name for p in install_dir.parent.iterdir()) == ["ollama"], "no download"


@pytest.mark.parametrize(
    ("archive", "said"),
    [
        (
            tar_zst({"bin/ollama": (b"x", 0o755), "../ollama.json": (b"{}", 0o644)}),
            "outside the destination",
        ),
        (tar_zst({"bin/ollama": (os.urandom(1 << 16), 0o755)})[:-9], "stops inside a frame"),
        (b"<html>Not Found</html>", "not an archive PAIR can unpack"),
    ],
    ids=["path-traversal", "cut-off", "not-zstd"],
)
async def test_a_download_that_cannot_be_unpacked_safely_installs_nothing(
    tmp_path: Path, site: tuple[Site, aiohttp.ClientSession], archive: bytes, said: str
) -> None:
    releases, session = site
    releases.publish("v0.14.2", archive)
    engines = tmp_path / "engines"
    engines.mkdir()
    progress: list[InstallProgress] = []
    with pytest.raises(errors.InternalError, match=said) as raised:
        await installer.install(
            releases.manifest(LINUX_X64),
            install_dir=engines / "ollama",
            session=session,
            values={},
            output=EngineLog(),
            progress=progress.append,
        )
    assert "nothing was unpacked" in raised.value.message
    assert progress[-1].error == raised.value.message and progress[-1].done
    assert list(engines.iterdir()) == [], "no install dir, no download, nothing beside them"


async def _stage_update(
    manifest: manifests.Manifest, session: aiohttp.ClientSession, install_dir: Path
) -> dict[str, str]:
    return await updater.stage(
        manifest,
        "0.14.3",
        install_dir=install_dir,
        binary=install_dir / "bin" / "ollama",
        session=session,
        values={},
        output=EngineLog(),
        report=installer.Reporter(EngineName("ollama"), lambda _: None),
    )


async def _installed_then_released(
    releases: Site, session: aiohttp.ClientSession, install_dir: Path
) -> manifests.Manifest:
    """The Linux x86-64 manifest, its release installed in ``install_dir``, then v0.14.3 out."""
    manifest = releases.manifest(LINUX_X64)
    await install_reporting(manifest, session, install_dir)
    releases.publish("v0.14.3")
    return manifest


async def test_linux_updates_from_the_release_tar_zst_checked_against_its_listing(
    tmp_path: Path, site: tuple[Site, aiohttp.ClientSession]
) -> None:
    releases, session = site
    install_dir = tmp_path / "engines" / "ollama"
    manifest = await _installed_then_released(releases, session, install_dir)
    values = await _stage_update(manifest, session, install_dir)
    await updater.replace(manifest, install_dir=install_dir, values=values, output=EngineLog())
    assert b"v0.14.3" in (install_dir / "bin" / "ollama").read_bytes()
    assert releases.requests[-2:] == [
        "/github/download/v0.14.3/sha256sum.txt",
        "/github/download/v0.14.3/ollama-linux-amd64.tar.zst",
    ]
    await updater.discard(install_dir)


async def test_an_update_the_listing_does_not_vouch_for_leaves_the_engine_as_it_is(
    tmp_path: Path, site: tuple[Site, aiohttp.ClientSession]
) -> None:
    releases, session = site
    install_dir = tmp_path / "engines" / "ollama"
    manifest = await _installed_then_released(releases, session, install_dir)
    releases.listed["ollama-linux-amd64.tar.zst"] = "f" * 64
    with pytest.raises(errors.InternalError, match="does not match its pinned checksum"):
        await _stage_update(manifest, session, install_dir)
    assert b"v0.14.2" in (install_dir / "bin" / "ollama").read_bytes()
    await updater.discard(install_dir)
    assert sorted(p.name for p in install_dir.parent.iterdir()) == ["ollama"]
