"""The install kinds the macOS and Windows manifests use, run here by a real broker: a zip with a
folder tree (as Ollama's Windows zip: the executable at its root, ``lib/ollama/…`` beside it)
and a downloaded installer run once (as LM Studio's install scripts), each served by a local
HTTP server; the engine is then found, started and uninstalled."""

from __future__ import annotations

import hashlib
import io
import stat
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

from tests.integration.conftest import Broker, free_port
from tests.integration.engines.conftest import OLLAMA_SHIM, write_override

StartBroker = Callable[..., Broker]
OLLAMA = {"engine": "ollama"}
LIBRARY = "lib/ollama/cuda_v13/libggml-cuda.so"

# Puts the emulator shim where the manifest's detect looks: the folder given as $1.
INSTALLER = """#!/bin/sh
set -e
mkdir -p "$1"
cat > "$1/ollama" <<'SHIM'
{shim}SHIM
chmod 755 "$1/ollama"
echo "installed into $1"
"""


def _release_zip(folder: Path) -> str:
    """A zip shaped as Ollama's Windows one, with the shim as its executable; its sha256."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as bundle:
        shim = zipfile.ZipInfo("ollama")
        shim.create_system, shim.external_attr = 3, (stat.S_IFREG | 0o755) << 16
        bundle.writestr(shim, OLLAMA_SHIM.replace("{python}", sys.executable))
        bundle.writestr("lib/ollama/ggml-base.so", b"\x7fELF")
        bundle.writestr(LIBRARY, b"\x7fELF")
    (folder / "ollama-test.zip").write_bytes(buffer.getvalue())
    return hashlib.sha256(buffer.getvalue()).hexdigest()


async def test_a_zip_with_a_folder_tree_is_installed_whole_and_runs(
    start_broker: StartBroker, tmp_path: Path, served_folder: tuple[Path, str]
) -> None:
    folder, url = served_folder
    digest = _release_zip(folder)
    data_dir = tmp_path / "node"
    # All of it: the bundled block of this platform may list checksums or unwrap.
    install = {
        "url": f"{url}/ollama-test.zip",
        "archive": "zip",
        "sha256": digest,
        "sha256_url": None,
        "unwrap": False,
    }
    write_override(
        data_dir,
        "ollama",
        {
            "detect": [{"path": "{install_dir}/ollama"}],
            "install": install,
            "runtime": {"port": free_port()},
        },
    )
    install_dir = data_dir.resolve() / "engines" / "ollama"
    broker = start_broker(data_dir=data_dir)
    async with broker.connect() as client:
        status = await client.call("engine:install", OLLAMA, timeout=60)
        assert status["binary"] == str(install_dir / "ollama")
        assert status["state"] == "running", "the unpacked executable runs"
        assert (install_dir / LIBRARY).is_file(), "its libraries stay beside it"
        removed = await client.call("engine:uninstall", OLLAMA, timeout=60)
        assert removed["installed"] is False
    assert not install_dir.exists()


async def test_an_installer_is_downloaded_run_once_and_removed(
    start_broker: StartBroker, tmp_path: Path, served_folder: tuple[Path, str]
) -> None:
    folder, url = served_folder
    shim = OLLAMA_SHIM.replace("{python}", sys.executable)
    (folder / "install.sh").write_text(INSTALLER.replace("{shim}", shim))
    data_dir = tmp_path / "node"
    write_override(
        data_dir,
        "ollama",
        {
            "detect": [{"path": "{install_dir}/ollama"}],
            "install": {
                "url": f"{url}/install.sh",
                "archive": None,  # the bundled blocks of Ollama unpack archives
                "sha256_url": None,
                "run": ["sh", "{download}", "{install_dir}"],
            },
            "runtime": {"port": free_port()},
        },
    )
    engines = data_dir.resolve() / "engines"
    broker = start_broker(data_dir=data_dir)
    async with broker.connect() as client:
        status = await client.call("engine:install", OLLAMA, timeout=60)
        assert status["binary"] == str(engines / "ollama" / "ollama")
        assert status["state"] == "running"
        stages = [p["stage"] for p in client.engine_events("install_progressed")]
        assert "running the installer" in stages and stages[-1] == "installed"
    assert sorted(p.name for p in engines.iterdir()) == ["ollama", "ollama.json"], (
        "the installer is not left behind"
    )
