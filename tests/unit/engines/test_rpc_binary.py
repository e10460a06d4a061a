"""The RPC server is the one beside llama-server, under either of its names."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from backend.components.engines.rpc_binary import rpc_server_path


def _executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_the_rpc_server_beside_llama_server_is_found(tmp_path: Path) -> None:
    server = _executable(tmp_path / "bin" / "llama-server")
    rpc = _executable(tmp_path / "bin" / "ggml-rpc-server")
    assert rpc_server_path(server) == rpc


def test_the_older_name_is_found_too(tmp_path: Path) -> None:
    server = _executable(tmp_path / "llama-server")
    rpc = _executable(tmp_path / "rpc-server")
    assert rpc_server_path(server) == rpc


def test_a_windows_build_has_exe_names(tmp_path: Path) -> None:
    server = _executable(tmp_path / "llama-server.exe")
    _executable(tmp_path / "ggml-rpc-server")  # not this build's: no .exe
    rpc = _executable(tmp_path / "rpc-server.exe")
    assert rpc_server_path(server) == rpc


def test_a_build_without_the_rpc_server_has_none(tmp_path: Path) -> None:
    server = _executable(tmp_path / "bin" / "llama-server")
    _executable(tmp_path / "elsewhere" / "ggml-rpc-server")
    assert rpc_server_path(server) is None


@pytest.mark.skipif(os.name == "nt", reason="the executable bit is POSIX's")
def test_a_file_that_cannot_run_is_not_the_rpc_server(tmp_path: Path) -> None:
    server = _executable(tmp_path / "llama-server")
    (tmp_path / "ggml-rpc-server").write_text("not executable")
    assert rpc_server_path(server) is None


@pytest.mark.skipif(os.name == "nt", reason="symbolic links need privileges on Windows")
def test_a_linked_llama_server_finds_the_rpc_server_of_its_build(tmp_path: Path) -> None:
    server = _executable(tmp_path / "opt" / "llama" / "llama-server")
    rpc = _executable(tmp_path / "opt" / "llama" / "ggml-rpc-server")
    link = tmp_path / "bin" / "llama-server"
    link.parent.mkdir()
    link.symlink_to(server)
    assert rpc_server_path(link) == rpc
