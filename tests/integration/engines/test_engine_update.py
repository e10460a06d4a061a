"""Updating engines in a real broker: versions, a staged update, failed downloads, refusals.

A local file server stands in for both the release feed (``latest.json``, shaped like GitHub's
``releases/latest``) and the download site; each archive holds a fake ``ollama`` that reports
its own version, from ``--version`` and from ``GET /api/version`` while it serves.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import subprocess
import sys
import tarfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from backend.protocol import errors
from tests.integration.conftest import Broker, Client, free_port
from tests.integration.engines.conftest import write_override, write_script

StartBroker = Callable[..., Broker]
OLLAMA = {"engine": "ollama"}

FAKE_OLLAMA = """#!{python}
import http.server, json, os, sys
VERSION = "{version}"
if sys.argv[1:] == ["--version"]:
    # What the real CLI prints when no server answers on OLLAMA_HOST.
    print("Warning: could not connect to a running Ollama instance")
    print("Warning: client version is " + VERSION)
    sys.exit(0)
if sys.argv[1:] != ["serve"]:
    sys.exit("this fake only knows `ollama serve` and `ollama --version`")
host, _, port = os.environ["OLLAMA_HOST"].rpartition(":")
ANSWERS = {"/api/version": {"version": VERSION}, "/api/tags": {"models": []},
           "/api/ps": {"models": []}}

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        answer = ANSWERS.get(self.path)
        body = json.dumps(answer if answer is not None else {"error": "not found"}).encode()
        self.send_response(200 if answer is not None else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

http.server.ThreadingHTTPServer((host, int(port)), Handler).serve_forever()
"""


def fake_ollama(version: str) -> str:
    """The fake engine's script for ``version``."""
    return FAKE_OLLAMA.replace("{python}", sys.executable).replace("{version}", version)


def publish(
    folder: Path,
    version: str,
    *,
    archive: bool = True,
    listed: str | None = None,
    engine: str | None = None,
) -> None:
    """Announce ``version`` as the latest; add its archive (the fake engine, or ``engine``)
    and its line in ``sha256sum.txt`` (``listed`` replaces the true checksum there)."""
    name = f"ollama-linux-{version}.tgz"
    digest = listed
    if archive:
        buffer = io.BytesIO()
        script = (engine or fake_ollama(version)).encode()
        with tarfile.open(fileobj=buffer, mode="w:gz") as bundle:
            info = tarfile.TarInfo("bin/ollama")
            info.size, info.mode = len(script), 0o755
            bundle.addfile(info, io.BytesIO(script))
        (folder / name).write_bytes(buffer.getvalue())
        digest = digest or hashlib.sha256(buffer.getvalue()).hexdigest()
    sums = folder / "sha256sum.txt"
    lines = sums.read_text().splitlines() if sums.exists() else []
    lines = [line for line in lines if not line.endswith(name)]
    sums.write_text("\n".join([*lines, f"{digest or '0' * 64}  ./{name}"]) + "\n")
    (folder / "latest.json").write_text(json.dumps({"tag_name": f"v{version}"}))


def update_override(data_dir: Path, site: str, port: int) -> None:
    """Ollama installed from the local site into PAIR's install dir, updated from it too."""
    write_override(
        data_dir,
        "ollama",
        {
            "detect": [{"path": "{install_dir}/bin/ollama"}],
            "install": {
                "url": f"{site}/ollama-linux-1.0.0.tgz",
                "archive": "tar",
                "sha256_url": None,  # the macOS and Windows blocks name one
            },
            "latest": {"url": f"{site}/latest.json"},
            "update": {
                "url": site + "/ollama-linux-{version}.tgz",
                "sha256_url": f"{site}/sha256sum.txt",
                "archive": "tar",
            },
            "runtime": {"port": port, "ready": {"timeout_s": 30}, "health": {"interval_s": 0.5}},
        },
    )


def served_version(port: int) -> str:
    """What the engine on ``port`` says its version is."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/version", timeout=5) as answer:
        return str(json.load(answer)["version"])


def progress_since(client: Client, since: int) -> list[dict[str, Any]]:
    """Ollama's install progress received after push number ``since``."""
    return [p for p in client.engine_events("install_progressed", since) if p["engine"] == "ollama"]


def leftovers(data_dir: Path) -> list[str]:
    """What an update may leave beside the install dir (nothing, once it is over)."""
    return sorted(
        path.name for path in (data_dir / "engines").glob("ollama.*") if path.name != "ollama.json"
    )


async def install_and_start(client: Client) -> dict[str, Any]:
    """Install version 1 and start it; its status."""
    installed = await client.call("engine:install", OLLAMA, timeout=60)
    assert installed["installed"] is True, installed
    running = await client.call("engine:start", OLLAMA, timeout=60)
    assert running["state"] == "running" and running["adopted"] is False, running
    return running  # type: ignore[no-any-return]


async def test_update_replaces_version_1_with_2_and_runs_it_again(
    start_broker: StartBroker, tmp_path: Path, served_folder: tuple[Path, str]
) -> None:
    folder, site = served_folder
    publish(folder, "1.0.0")
    publish(folder, "2.0.0")
    data_dir, port = tmp_path / "node", free_port()
    update_override(data_dir, site, port)
    broker = start_broker(data_dir=data_dir)
    async with broker.connect() as client:
        await client.call("engine:install", OLLAMA, timeout=60)
        stopped = await client.call("engine:versions", OLLAMA, timeout=30)
        assert stopped == {
            "engine": "ollama",
            "installed": "1.0.0",  # from `ollama --version`: nothing runs yet
            "latest": "2.0.0",
            "update_available": True,
            "can_update": True,
            "reason": None,
        }
        before = await client.call("engine:start", OLLAMA, timeout=60)
        assert served_version(port) == "1.0.0"
        assert (await client.call("engine:versions", OLLAMA, timeout=30))["installed"] == "1.0.0"

        since = len(client.pushes)
        after = await client.call("engine:update", OLLAMA, timeout=120)
        assert after["state"] == "running" and after["adopted"] is False
        assert after["pid"] != before["pid"] and not psutil.pid_exists(before["pid"])
        assert after["desired"] is True, "the desired state is kept"
        assert served_version(port) == "2.0.0"
        progress = progress_since(client, since)
        stages = [p["stage"] for p in progress]
        assert [p for p in progress if p["done"]] == [progress[-1]]
        assert progress[-1]["stage"] == "updated" and progress[-1]["error"] is None
        assert any(p["stage"] == "downloading" and p["percent"] is not None for p in progress)
        assert stages.index("downloading") < stages.index("replacing") < stages.index("restarting")
        assert leftovers(data_dir) == []
        now = await client.call("engine:versions", OLLAMA, timeout=30)
        assert (now["installed"], now["latest"], now["update_available"]) == (
            "2.0.0",
            "2.0.0",
            False,
        )

        since = len(client.pushes)
        again = await client.call("engine:update", OLLAMA, timeout=60)
        assert again["pid"] == after["pid"], "already the latest: no restart"
        assert [p["stage"] for p in progress_since(client, since)] == [
            "checking for a new version",
            "up to date",
        ]

        stopped_by_user = await client.call("engine:stop", OLLAMA, timeout=30)
        assert stopped_by_user["desired"] is False
        publish(folder, "3.0.0")
        updated = await client.call("engine:update", OLLAMA, timeout=120)
        assert (updated["state"], updated["desired"]) == ("stopped", False), "not started"
        versions = await client.call("engine:versions", OLLAMA, timeout=30)
        assert versions["installed"] == "3.0.0"


async def test_a_failed_download_leaves_version_1_installed_and_running(
    start_broker: StartBroker, tmp_path: Path, served_folder: tuple[Path, str]
) -> None:
    folder, site = served_folder
    publish(folder, "1.0.0")
    publish(folder, "2.0.0", listed="0" * 64)  # the checksum list disagrees with the archive
    data_dir, port = tmp_path / "node", free_port()
    update_override(data_dir, site, port)
    broker = start_broker(data_dir=data_dir)
    async with broker.connect() as client:
        running = await install_and_start(client)

        since = len(client.pushes)
        with pytest.raises(errors.InternalError, match="does not match its pinned checksum"):
            await client.call("engine:update", OLLAMA, timeout=60)
        last = progress_since(client, since)[-1]
        assert (last["stage"], last["done"]) == ("error", True)
        assert "checksum" in last["error"]
        await _assert_unchanged(client, running, port, data_dir)

        publish(folder, "3.0.0", archive=False, listed="1" * 64)  # announced, never uploaded
        with pytest.raises(errors.Unavailable, match="HTTP 404"):
            await client.call("engine:update", OLLAMA, timeout=60)
        await _assert_unchanged(client, running, port, data_dir)
        versions = await client.call("engine:versions", OLLAMA, timeout=30)
        assert (versions["installed"], versions["latest"]) == ("1.0.0", "3.0.0")
        assert versions["update_available"] is True


async def test_a_new_version_that_does_not_start_gives_way_to_the_previous_one(
    start_broker: StartBroker, tmp_path: Path, served_folder: tuple[Path, str]
) -> None:
    folder, site = served_folder
    publish(folder, "1.0.0")
    broken = fake_ollama("2.0.0").replace(
        "host, _, port = ", 'sys.exit("broken build")\nhost, _, port = '
    )
    publish(folder, "2.0.0", engine=broken)
    data_dir, port = tmp_path / "node", free_port()
    update_override(data_dir, site, port)
    broker = start_broker(data_dir=data_dir)
    async with broker.connect() as client:
        await install_and_start(client)
        with pytest.raises(errors.InternalError, match="the previous version is back in place"):
            await client.call("engine:update", OLLAMA, timeout=120)
        status = await client.call("engine:status", OLLAMA)
        assert (status["state"], status["desired"], status["error"]) == ("running", True, None)
        assert served_version(port) == "1.0.0"
        assert leftovers(data_dir) == []
        open_errors = [e["id"] for e in await client.call("errors:get-initial")]
        assert "engine:start-failed:ollama" not in open_errors


async def _assert_unchanged(
    client: Client, before: dict[str, Any], port: int, data_dir: Path
) -> None:
    status = await client.call("engine:status", OLLAMA)
    assert (status["state"], status["pid"], status["desired"]) == ("running", before["pid"], True)
    assert served_version(port) == "1.0.0"
    assert leftovers(data_dir) == []


async def test_update_refuses_an_adopted_engine_and_leaves_it_alone(
    start_broker: StartBroker, tmp_path: Path, served_folder: tuple[Path, str]
) -> None:
    folder, site = served_folder
    publish(folder, "1.0.0")
    publish(folder, "2.0.0")
    data_dir, port = tmp_path / "node", free_port()
    update_override(data_dir, site, port)
    theirs = write_script(tmp_path / "their-ollama", fake_ollama("1.0.0"))
    engine = subprocess.Popen(
        [str(theirs), "serve"],
        env={"OLLAMA_HOST": f"127.0.0.1:{port}"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        broker = start_broker(data_dir=data_dir)
        async with broker.connect() as client:
            await client.call("engine:install", OLLAMA, timeout=60)
            await _wait_answering(port)
            adopted = await client.call("engine:start", OLLAMA, timeout=60)
            assert adopted["adopted"] is True
            with pytest.raises(errors.Conflict, match="PAIR did not start it") as refused:
                await client.call("engine:update", OLLAMA, timeout=60)
            assert refused.value.code == -32002
            versions = await client.call("engine:versions", OLLAMA, timeout=30)
            assert versions["can_update"] is False and "did not start" in versions["reason"]
            assert versions["update_available"] is True  # PAIR's copy is 1.0.0, 2.0.0 is out
            status = await client.call("engine:status", OLLAMA)
            assert (status["state"], status["adopted"]) == ("running", True)
        assert engine.poll() is None and served_version(port) == "1.0.0"
    finally:
        engine.terminate()
        engine.wait(10)


@pytest.mark.parametrize(
    ("placed", "needle"),
    [("outside", "installed outside PAIR"), ("nowhere", "not installed")],
)
async def test_update_refuses_an_engine_pair_did_not_install(
    start_broker: StartBroker,
    tmp_path: Path,
    served_folder: tuple[Path, str],
    placed: str,
    needle: str,
) -> None:
    folder, site = served_folder
    publish(folder, "2.0.0")
    data_dir, port = tmp_path / "node", free_port()
    update_override(data_dir, site, port)
    override = json.loads((data_dir / "engines" / "ollama.json").read_text())
    outside = tmp_path / "usr-local-bin" / "ollama"
    outside.parent.mkdir()
    if placed == "outside":
        write_script(outside, fake_ollama("1.0.0"))
    override["detect"] = [{"path": str(outside)}]
    write_override(data_dir, "ollama", override)
    broker = start_broker(data_dir=data_dir)
    async with broker.connect() as client:
        with pytest.raises(errors.Conflict, match=needle):
            await client.call("engine:update", OLLAMA, timeout=60)
        versions = await client.call("engine:versions", OLLAMA, timeout=30)
        assert versions["can_update"] is False and needle in versions["reason"]
        assert versions["latest"] == "2.0.0"
        assert versions["installed"] == ("1.0.0" if placed == "outside" else None)
        assert progress_since(client, 0) == [], "a refused update sends no progress"
    if placed == "outside":
        assert fake_ollama("1.0.0") == outside.read_text(), "their engine is untouched"


async def _wait_answering(port: int) -> None:
    deadline = time.monotonic() + 20
    while True:
        try:
            await asyncio.to_thread(served_version, port)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)
