"""What the tests of other computers at the front doors share: this machine's own network address
(connecting to it plays another computer, since the door then sees that address as its peer), a
data dir whose Ollama is the shim, and the ``pair api-key`` command."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.integration.conftest import ROOT
from tests.integration.engines.conftest import OLLAMA_SHIM, write_override, write_script
from tests.support.ports import free_port


def network_address() -> str | None:
    """An IPv4 address of this machine that is not loopback or link-local, if it has one."""
    for addresses in psutil.net_if_addrs().values():
        for entry in addresses:
            if entry.family != socket.AF_INET:
                continue
            address = ipaddress.ip_address(entry.address)
            if not (address.is_loopback or address.is_link_local):
                return entry.address
    return None


def network_address_or_skip() -> str:
    """This machine's network address; the test is skipped on a machine with none."""
    address = network_address()
    if address is None:
        pytest.skip("this machine has no network address besides loopback")
    return address


def ollama_data_dir(tmp_path: Path, name: str) -> Path:
    """The data dir ``tmp_path / name`` of a node whose Ollama is the shim, on a free port."""
    data_dir = tmp_path / name
    shim = write_script(tmp_path / "ollama", OLLAMA_SHIM)
    runtime = {"port": free_port(), "ready": {"timeout_s": 30}}
    write_override(data_dir, "ollama", {"detect": [{"path": str(shim)}], "runtime": runtime})
    return data_dir


async def api_key(data_dir: Path, *args: str) -> str:
    """What ``pair api-key ARGS`` prints for the node of ``data_dir`` (run in a thread)."""
    return await asyncio.to_thread(_api_key, data_dir, *args)


def _api_key(data_dir: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "backend", "api-key", *args, "--data-dir", str(data_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return done.stdout
