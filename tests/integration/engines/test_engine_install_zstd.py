"""Ollama's Linux release kind, a zstd-compressed tar (``ollama-linux-amd64.tar.zst``), installed
by a real broker from a local HTTP server: ``bin/ollama`` (the emulator shim) is found, started
and uninstalled; a download whose zstd data is damaged installs nothing and says why."""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from backend.protocol import errors
from tests.integration.conftest import Broker, free_port
from tests.integration.engines.conftest import OLLAMA_SHIM, write_override
from tests.unit.engines.tar_zst import tar_zst

StartBroker = Callable[..., Broker]
OLLAMA = {"engine": "ollama"}
ARCHIVE = "ollama-linux-amd64.tar.zst"
LIBRARY = "lib/ollama/cuda_v13/libggml-cuda.so"


def _release(folder: Path) -> bytes:
    """A ``.tar.zst`` shaped as Ollama's Linux one, with the shim as ``bin/ollama``."""
    shim = OLLAMA_SHIM.replace("{python}", sys.executable).encode()
    data = tar_zst(
        {
            "bin/ollama": (shim, 0o755),
            "lib/ollama/libggml-base.so": (b"\x7fELF", 0o644),
            LIBRARY: (b"\x7fELF", 0o644),
        }
    )
    (folder / ARCHIVE).write_bytes(data)
    return data


def _install_override(data_dir: Path, url: str, sha256: str) -> None:
    write_override(
        data_dir,
        "ollama",
        {
            "detect": [{"path": "{install_dir}/bin/ollama"}],
            "install": {"url": url, "archive": "tar.zst", "sha256": sha256, "sha256_url": None},
            "runtime": {"port": free_port()},
        },
    )


async def test_a_tar_zst_is_installed_found_run_and_uninstalled(
    start_broker: StartBroker, tmp_path: Path, served_folder: tuple[Path, str]
) -> None:
    folder, url = served_folder
    digest = hashlib.sha256(_release(folder)).hexdigest()
    data_dir = tmp_path / "node"
    _install_override(data_dir, f"{url}/{ARCHIVE}", digest)
    install_dir = data_dir.resolve() / "engines" / "ollama"
    broker = start_broker(data_dir=data_dir)
    async with broker.connect() as client:
        status = await client.call("engine:install", OLLAMA, timeout=60)
        assert status["installed"] is True
        assert status["binary"] == str(install_dir / "bin" / "ollama")
        assert (install_dir / LIBRARY).is_file(), "its libraries stay beside it"
        running = await client.call("engine:start", OLLAMA, timeout=60)
        assert running["state"] == "running", "the unpacked executable runs"
        removed = await client.call("engine:uninstall", OLLAMA, timeout=60)
        assert removed["installed"] is False
    assert not install_dir.exists()


async def test_damaged_zstd_data_installs_nothing(
    start_broker: StartBroker, tmp_path: Path, served_folder: tuple[Path, str]
) -> None:
    folder, url = served_folder
    data = _release(folder)
    cut = data[: len(data) // 2]
    (folder / ARCHIVE).write_bytes(cut)
    data_dir = tmp_path / "node"
    _install_override(data_dir, f"{url}/{ARCHIVE}", hashlib.sha256(cut).hexdigest())
    broker = start_broker(data_dir=data_dir)
    async with broker.connect() as client:
        with pytest.raises(errors.InternalError, match="not an archive PAIR can unpack"):
            await client.call("engine:install", OLLAMA, timeout=60)
        assert (await client.call("engine:status", OLLAMA))["installed"] is False
        last = client.engine_events("install_progressed")[-1]
        assert last["stage"] == "error" and "nothing was unpacked" in last["error"]
    engines = data_dir.resolve() / "engines"
    assert sorted(p.name for p in engines.iterdir()) == ["ollama.json"], "nor a download"
