"""find_llama_server explains why it found nothing; fake package layouts, no real build needed."""

from __future__ import annotations

import importlib.util
import json
from importlib.machinery import ModuleSpec
from pathlib import Path

import pytest

from backend.devtools import llama_server
from backend.devtools.llama_server import find_llama_server, search_llama_server


def _pretend_installed_at(monkeypatch: pytest.MonkeyPatch, package_dir: Path | None) -> None:
    real_find_spec = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> ModuleSpec | None:
        if name != llama_server.PACKAGE:
            return real_find_spec(name, package)
        if package_dir is None:
            return None
        spec = ModuleSpec(name, None, is_package=True)
        spec.submodule_search_locations = [str(package_dir)]
        return spec

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def _fake_binary(package_dir: Path, script: str) -> Path:
    binary = package_dir / "bin" / "llama-server"
    binary.parent.mkdir(parents=True)
    binary.write_text(f"#!/bin/sh\n{script}\n")
    binary.chmod(0o755)
    return binary


def test_not_installed_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    _pretend_installed_at(monkeypatch, None)
    search = search_llama_server()
    assert search.binary is None
    assert "not installed" in search.reason
    assert ".[engines]" in search.reason
    assert find_llama_server() is None


def test_installed_without_a_binary_says_so(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _pretend_installed_at(monkeypatch, tmp_path)
    search = search_llama_server()
    assert search.binary is None
    assert "bin/llama-server is missing" in search.reason


def test_a_binary_that_cannot_start_reports_its_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _fake_binary(
        tmp_path, "echo 'cannot open shared object file: libllama-common.so.0' >&2\nexit 127"
    )
    _pretend_installed_at(monkeypatch, tmp_path)
    search = search_llama_server()
    assert search.binary is None
    assert "does not start" in search.reason
    assert "exit status 127" in search.reason
    assert "libllama-common.so.0" in search.reason


def test_a_binary_that_starts_is_found(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    binary = _fake_binary(tmp_path, 'echo "version: 1 (test)" >&2')
    _pretend_installed_at(monkeypatch, tmp_path)
    assert search_llama_server().binary == binary
    assert find_llama_server() == binary


def test_the_entry_point_runs_once_to_create_the_library_symlinks(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A shared-library build: the binary starts only after the package made its symlinks."""
    package_dir = tmp_path / llama_server.PACKAGE
    binary = _fake_binary(package_dir, '[ -e "$(dirname "$0")/libllama-common.so.0" ] || exit 127')
    (binary.parent / "libllama-common.so.0.0.1").write_text("")
    (binary.parent / "_symlinks.json").write_text(
        json.dumps({"libllama-common.so.0": "libllama-common.so.0.0.1"})
    )
    # Like the real package: importing it materialises the links and removes the manifest.
    (package_dir / "__init__.py").write_text(
        "import json, os, pathlib\n"
        "bin_dir = pathlib.Path(__file__).parent / 'bin'\n"
        "manifest = bin_dir / '_symlinks.json'\n"
        "if manifest.exists():\n"
        "    for name, target in json.loads(manifest.read_text()).items():\n"
        "        os.symlink(target, bin_dir / name)\n"
        "    manifest.unlink()\n"
    )
    (package_dir / "cli.py").write_text("import sys\nsys.exit(0 if '--info' in sys.argv else 2)\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # the child imports the fake package
    _pretend_installed_at(monkeypatch, package_dir)

    assert search_llama_server().binary == binary
    assert (binary.parent / "libllama-common.so.0").is_symlink()
    assert not (binary.parent / "_symlinks.json").exists()
