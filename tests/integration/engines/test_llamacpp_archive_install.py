"""llama.cpp as a frozen app installs it: the release archive of this platform from a GitHub-like
release feed (a local aiohttp server), its published SHA-256 enforced, unpacked into PAIR's
install dir, run, updated from the same feed and uninstalled; no pip anywhere."""

from __future__ import annotations

import hashlib
import io
import struct
import sys
import tarfile
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from backend.components.engines.manifest import INSTALL_METHOD_ENV, platform_keys
from backend.protocol import errors
from tests.integration.conftest import Broker, Client, free_port
from tests.integration.engines.conftest import write_override

StartBroker = Callable[..., Broker]
LLAMACPP = {"engine": "llamacpp"}
REPO = "/repos/ggml-org/llama.cpp/releases"
ASSET = "llama-b{version}-bin-test.tar.gz"

# A stand-in for llama-server: `--version` as llama.cpp prints it, else a server of /health and
# the few paths PAIR asks a running llama-server for.
LLAMA_SERVER = """#!{python}
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

args = sys.argv[1:]
if args == ["--version"]:
    sys.stderr.write("version: {build} (0fake00)\\nbuilt with a test for a test\\n")
    sys.exit(0)


def option(name, default):
    return args[args.index(name) + 1] if name in args else default


slots = int(option("-np", "1"))
answers = {
    "/health": {"status": "ok"},
    "/v1/models": {"data": [{"id": option("--alias", "model")}]},
    "/props": {"total_slots": slots},
    "/slots": [{"id": slot, "is_processing": False} for slot in range(slots)],
}


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        answer = answers.get(self.path.split("?")[0])
        body = json.dumps(answer if answer is not None else {"error": "not here"}).encode()
        self.send_response(200 if answer is not None else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_):
        pass


address = (option("--host", "127.0.0.1"), int(option("--port", "8080")))
ThreadingHTTPServer(address, Handler).serve_forever()
"""


@dataclass
class ReleaseSite:
    """GitHub's release API and downloads for llama.cpp, as far as PAIR uses them."""

    url: str = ""
    latest: int = 0
    archives: dict[str, bytes] = field(default_factory=dict)
    digests: dict[str, str | None] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)

    def publish(self, build: int, *, digest: str | None = "right") -> str:
        """Release ``b<build>``: its archive and the digest its release lists (``right``: the
        archive's, else the given text or no digest at all); returns the asset's name."""
        name = ASSET.replace("{version}", str(build))
        self.archives[name] = _release_archive(build)
        right = "sha256:" + hashlib.sha256(self.archives[name]).hexdigest()
        self.digests[name] = right if digest == "right" else digest
        self.latest = build
        return name


def _release_archive(build: int) -> bytes:
    """A release-like tarball: ``llama-b<build>/llama-server`` and ``LICENSE``."""
    buffer = io.BytesIO()
    script = LLAMA_SERVER.replace("{python}", sys.executable).replace("{build}", str(build))
    with tarfile.open(fileobj=buffer, mode="w:gz") as bundle:
        for name, data, mode in [
            ("llama-server", script.encode(), 0o755),
            ("LICENSE", b"MIT", 0o644),
        ]:
            info = tarfile.TarInfo(f"llama-b{build}/{name}")
            info.size, info.mode = len(data), mode
            bundle.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.fixture
async def site() -> AsyncIterator[ReleaseSite]:
    """The release site on a free port of this test's own event loop."""
    state = ReleaseSite()

    @web.middleware
    async def record(request: web.Request, handler: Any) -> web.StreamResponse:
        state.requests.append(request.path)
        return await handler(request)  # type: ignore[no-any-return]

    async def latest(_: web.Request) -> web.Response:
        return web.json_response({"tag_name": f"b{state.latest}"})

    async def release(request: web.Request) -> web.Response:
        tag = request.match_info["tag"]
        assets = [
            {"name": name, "digest": digest, "browser_download_url": f"{state.url}/d/{tag}/{name}"}
            for name, digest in state.digests.items()
            if name.startswith(f"llama-{tag}-")
        ]
        if not assets:
            raise web.HTTPNotFound()
        return web.json_response({"tag_name": tag, "assets": assets})

    async def download(request: web.Request) -> web.Response:
        archive = state.archives.get(request.match_info["name"])
        if archive is None:
            raise web.HTTPNotFound()
        return web.Response(body=archive, content_type="application/octet-stream")

    app = web.Application(middlewares=[record])
    app.router.add_get(f"{REPO}/latest", latest)
    app.router.add_get(REPO + "/tags/{tag}", release)
    app.router.add_get("/d/{tag}/{name}", download)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    state.url = f"http://127.0.0.1:{server.port}"
    yield state
    await server.close()


def _node(tmp_path: Path, site: ReleaseSite, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A data dir whose llama.cpp comes from ``site`` the way a frozen app gets it."""
    monkeypatch.setenv(INSTALL_METHOD_ENV, "archive")  # what sys.frozen chooses
    data_dir = tmp_path / "node"
    release = {
        "url": site.url + "/d/b{version}/{asset}",
        "sha256_url": site.url + REPO + "/tags/b{version}",
    }
    write_override(
        data_dir,
        "llamacpp",
        {
            "methods": {
                "archive": {
                    "detect": [{"path": "{install_dir}/llama-server"}],  # not one on PATH
                    "assets": {platform_keys()[1]: ASSET},
                    "install": release,
                    "update": release,
                    "latest": {"url": site.url + REPO + "/latest"},
                }
            },
            "runtime": {
                "port": free_port(),
                "ready": {"timeout_s": 30},
                "health": {"interval_s": 0.5, "request_timeout_s": 1.0},
            },
        },
    )
    return data_dir


def _progress(client: Client, since: int = 0) -> list[dict[str, Any]]:
    pushes = client.engine_events("install_progressed", since)
    return [p for p in pushes if p["engine"] == "llamacpp"]


def _leftovers(data_dir: Path) -> list[str]:
    """What the install left in PAIR's engines folder besides the override."""
    folder = data_dir / "engines"
    return sorted(
        p.name for p in folder.iterdir() if p.name.startswith("llamacpp.") and p.suffix != ".json"
    )


def _tiny_gguf(store: Path) -> None:
    """The smallest file the model store lists: a GGUF v3 header without tensors or metadata."""
    store.mkdir(parents=True, exist_ok=True)
    (store / "tiny.gguf").write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 0))


async def test_a_frozen_app_installs_runs_updates_and_removes_llama_server(
    start_broker: StartBroker, tmp_path: Path, site: ReleaseSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    asset = site.publish(100)
    data_dir = _node(tmp_path, site, monkeypatch)
    install_dir = data_dir.resolve() / "engines" / "llamacpp"
    broker = start_broker(data_dir=data_dir)
    async with broker.connect() as client:
        assert (await client.call("engine:status", LLAMACPP))["installed"] is False
        status = await client.call("engine:install", LLAMACPP, timeout=60)
        assert status["installed"] is True
        assert status["binary"] == str(install_dir / "llama-server")
        assert (install_dir / "LICENSE").is_file(), "the release folder is unwrapped"
        assert _leftovers(data_dir) == [], "no download or scratch folder stays"
        progress = _progress(client)
        stages = [p["stage"] for p in progress]
        assert stages[0] == "checking for the latest version"
        assert any(p["stage"] == "downloading" and p["percent"] == 100.0 for p in progress)
        assert any(p["stage"] == "unpacking" and p["percent"] is None for p in progress)
        assert (progress[-1]["stage"], progress[-1]["done"]) == ("installed", True)
        asked = site.requests
        assert asked.index(f"{REPO}/tags/b100") < asked.index(f"/d/b100/{asset}"), "digest first"

        versions = await client.call("engine:versions", LLAMACPP, timeout=30)
        assert (versions["installed"], versions["latest"]) == ("100", "100")  # `--version`
        assert (versions["update_available"], versions["can_update"]) == (False, True)

        _tiny_gguf(data_dir / "models" / "llamacpp")
        running = await client.call("engine:start", LLAMACPP, timeout=60)
        assert running["state"] == "running"
        async with httpx.AsyncClient(timeout=5) as http:
            health = await http.get(f"http://127.0.0.1:{running['port']}/health")
        assert health.json() == {"status": "ok"}, "PAIR runs the unpacked executable"

        site.publish(101)
        since = len(client.pushes)
        updated = await client.call("engine:update", LLAMACPP, timeout=120)
        assert updated["state"] == "running", "what ran runs again"
        assert _progress(client, since)[-1]["stage"] == "updated"
        versions = await client.call("engine:versions", LLAMACPP, timeout=30)
        assert versions["installed"] == "101"
        assert _leftovers(data_dir) == [], "the previous version goes once the new one runs"

        removed = await client.call("engine:uninstall", LLAMACPP, timeout=60)
        assert removed["installed"] is False and removed["state"] == "not-installed"
        assert not install_dir.exists()
        assert (data_dir / "models" / "llamacpp" / "tiny.gguf").is_file(), "models stay"


async def test_the_published_checksum_is_enforced_and_a_failure_installs_nothing(
    start_broker: StartBroker, tmp_path: Path, site: ReleaseSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    site.publish(100, digest="sha256:" + "0" * 64)
    data_dir = _node(tmp_path, site, monkeypatch)
    broker = start_broker(data_dir=data_dir)
    async with broker.connect() as client:
        with pytest.raises(errors.InternalError, match="does not match its pinned checksum"):
            await client.call("engine:install", LLAMACPP, timeout=60)
        last = _progress(client)[-1]
        assert (last["stage"], last["done"]) == ("error", True) and "checksum" in last["error"]
        assert (await client.call("engine:status", LLAMACPP))["installed"] is False
        assert not (data_dir / "engines" / "llamacpp").exists() and _leftovers(data_dir) == []

        site.publish(100, digest=None)  # an asset GitHub computed no digest for
        with pytest.raises(errors.InternalError, match="lists no SHA-256 checksum"):
            await client.call("engine:install", LLAMACPP, timeout=60)
        assert not (data_dir / "engines" / "llamacpp").exists() and _leftovers(data_dir) == []

        site.publish(100)
        status = await client.call("engine:install", LLAMACPP, timeout=60)
        assert status["installed"] is True, "a later install with the right digest works"
