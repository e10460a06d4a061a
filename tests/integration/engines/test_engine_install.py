"""Installing engines: download, checksum, unpack, detect; offline; uninstall."""

from __future__ import annotations

import hashlib
import io
import sys
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from backend.protocol import errors
from tests.integration.conftest import Broker, free_port, serve_folder
from tests.integration.engines.conftest import OLLAMA_SHIM, write_override

StartBroker = Callable[..., Broker]


@pytest.fixture
def file_server(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """A plain HTTP server serving a folder: (folder, port)."""
    folder = tmp_path / "www"
    folder.mkdir()
    with serve_folder(folder) as url:
        yield folder, int(url.rsplit(":", 1)[1])


def _ollama_archive(folder: Path) -> str:
    """A release-like tarball with ``bin/ollama`` (the emulator shim); returns its sha256."""
    buffer = io.BytesIO()
    script = OLLAMA_SHIM.replace("{python}", sys.executable).encode()
    with tarfile.open(fileobj=buffer, mode="w:gz") as bundle:
        info = tarfile.TarInfo("bin/ollama")
        info.size, info.mode = len(script), 0o755
        bundle.addfile(info, io.BytesIO(script))
    (folder / "ollama-linux.tgz").write_bytes(buffer.getvalue())
    return hashlib.sha256(buffer.getvalue()).hexdigest()


def _install_override(data_dir: Path, url: str, sha256: str | None) -> None:
    write_override(
        data_dir,
        "ollama",
        {
            "detect": [{"path": "{install_dir}/bin/ollama"}],
            # No checksum listing: a platform block of the real manifest (macOS, Windows) names one.
            "install": {"url": url, "archive": "tar", "sha256": sha256, "sha256_url": None},
            "platforms": {},
            "runtime": {"port": free_port()},
        },
    )


async def test_install_downloads_checks_unpacks_and_the_engine_then_runs(
    start_broker: StartBroker, tmp_path: Path, file_server: tuple[Path, int]
) -> None:
    folder, port = file_server
    digest = _ollama_archive(folder)
    data_dir = tmp_path / "node"
    _install_override(data_dir, f"http://127.0.0.1:{port}/ollama-linux.tgz", digest)
    broker = start_broker(data_dir=data_dir)
    async with broker.connect() as client:
        assert (await client.call("engine:status", {"engine": "ollama"}))["installed"] is False
        status = await client.call("engine:install", {"engine": "ollama"}, timeout=60)
        assert status["installed"] is True
        assert status["binary"] == str(data_dir.resolve() / "engines" / "ollama" / "bin" / "ollama")
        progress = client.engine_events("install_progressed")
        assert progress[-1]["done"] is True and progress[-1]["stage"] == "installed"
        assert any(p["stage"] == "unpacking" and p["percent"] is None for p in progress)
        running = await client.call("engine:start", {"engine": "ollama"}, timeout=60)
        assert running["state"] == "running"
        removed = await client.call("engine:uninstall", {"engine": "ollama"}, timeout=60)
        assert removed["installed"] is False and removed["state"] == "not-installed"
        assert not (data_dir / "engines" / "ollama").exists()


async def test_a_checksum_mismatch_installs_nothing(
    start_broker: StartBroker, tmp_path: Path, file_server: tuple[Path, int]
) -> None:
    folder, port = file_server
    _ollama_archive(folder)
    data_dir = tmp_path / "node"
    _install_override(data_dir, f"http://127.0.0.1:{port}/ollama-linux.tgz", "0" * 64)
    broker = start_broker(data_dir=data_dir)
    async with broker.connect() as client:
        with pytest.raises(errors.InternalError, match="does not match its pinned checksum"):
            await client.call("engine:install", {"engine": "ollama"}, timeout=60)
        assert (await client.call("engine:status", {"engine": "ollama"}))["installed"] is False
    assert not (data_dir / "engines" / "ollama").exists()


async def test_offline_install_fails_with_an_actionable_error(
    start_broker: StartBroker, tmp_path: Path
) -> None:
    data_dir = tmp_path / "node"
    _install_override(data_dir, f"http://127.0.0.1:{free_port()}/ollama.tgz", None)
    broker = start_broker(data_dir=data_dir)
    async with broker.connect() as client:
        with pytest.raises(errors.Unavailable, match="check the internet connection"):
            await client.call("engine:install", {"engine": "ollama"}, timeout=60)
        last = client.engine_events("install_progressed")[-1]
        assert last["stage"] == "error" and last["done"] is True


async def test_uninstall_refuses_an_engine_pair_did_not_install(
    start_broker: StartBroker, ollama_node: tuple[Path, int]
) -> None:
    data_dir, _ = ollama_node
    broker = start_broker(data_dir=data_dir)
    async with broker.connect() as client:
        with pytest.raises(errors.Conflict, match="PAIR did not install Ollama"):
            await client.call("engine:uninstall", {"engine": "ollama"})
