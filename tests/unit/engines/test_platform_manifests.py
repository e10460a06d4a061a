"""What the bundled Ollama and LM Studio manifests say on each platform (keys injected, as
``sys.platform`` and ``platform.machine()`` give them there): where each is installed from,
checked against what, and where PAIR looks for it; Linux exactly as before."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import msgspec
import pytest

from backend.components.engines import manifest as manifests
from backend.components.engines.detect import find_executable, is_executable
from backend.components.engines.install import download_target
from backend.components.engines.manifest import build, platform_keys
from backend.components.engines.unpacking import keeps_file_modes

RELEASES = "https://github.com/ollama/ollama/releases/download/v{version}"
CHECKSUMS = f"{RELEASES}/sha256sum.txt"
LINUX_X64 = ("linux", "linux/x86_64")
LINUX_ARM = ("linux", "linux/aarch64")
MAC_ARM = ("darwin", "darwin/arm64")
MAC_INTEL = ("darwin", "darwin/x86_64")
WINDOWS_X64 = ("windows", "windows/amd64")
WINDOWS_ARM = ("windows", "windows/arm64")
POWERSHELL = ["powershell", "-NoProfile", "-NonInteractive", "-ExecutionPolicy", "Bypass"]


def _engine(name: str, keys: tuple[str, str]) -> manifests.Manifest:
    return build(manifests.bundled_documents()[name], name, "archive", keys)


@pytest.mark.parametrize(
    ("system_platform", "machine", "keys"),
    [
        ("linux", "x86_64", LINUX_X64),
        ("linux", "aarch64", LINUX_ARM),
        ("darwin", "arm64", MAC_ARM),
        ("darwin", "x86_64", MAC_INTEL),
        ("win32", "AMD64", WINDOWS_X64),
        ("win32", "ARM64", WINDOWS_ARM),
        ("freebsd14", "amd64", ("linux", "linux/amd64")),
    ],
)
def test_the_platform_keys_of_each_system_and_machine(
    system_platform: str, machine: str, keys: tuple[str, str]
) -> None:
    assert platform_keys(system_platform, machine) == keys


# -- Ollama -----------------------------------------------------------------------------------


@pytest.mark.parametrize("keys", [LINUX_X64, LINUX_ARM, ("linux", "linux/riscv64")])
def test_linux_installs_and_finds_ollama_exactly_as_before(keys: tuple[str, str]) -> None:
    document = copy.deepcopy(manifests.bundled_documents()["ollama"])
    for added in ("darwin", "windows", "windows/amd64", "windows/arm64"):
        del document["platforms"][added]
    del document["download_page"]
    before = build(document, "ollama", "archive", keys)
    now = _engine("ollama", keys)
    assert now.download_page == "https://ollama.com/download"
    assert msgspec.structs.replace(now, download_page=None) == before
    assert now.detect[0].which == "ollama"


@pytest.mark.parametrize(("keys", "arch"), [(LINUX_X64, "amd64"), (LINUX_ARM, "arm64")])
def test_linux_installs_and_updates_from_the_zstd_tarball_ollama_now_publishes(
    keys: tuple[str, str], arch: str
) -> None:
    ollama = _engine("ollama", keys)
    install, update = ollama.install, ollama.update
    assert install is not None and update is not None
    name = f"ollama-linux-{arch}.tar.zst"  # .tgz until v0.14.0; no longer published
    assert (install.url, install.archive, install.sha256_url, install.binary) == (
        f"https://ollama.com/download/{name}",
        "tar.zst",
        None,
        "bin/ollama",
    )
    assert (update.url, update.sha256_url, update.archive) == (
        f"{RELEASES}/{name}",
        CHECKSUMS,
        "tar.zst",
    )


@pytest.mark.parametrize("keys", [MAC_ARM, MAC_INTEL])
def test_a_mac_installs_the_universal_cli_tarball_checked_against_the_release(
    keys: tuple[str, str],
) -> None:
    ollama = _engine("ollama", keys)
    for spec in (ollama.install, ollama.update):
        assert spec is not None
        assert spec.url == f"{RELEASES}/ollama-darwin.tgz"
        assert (spec.sha256_url, spec.sha256, spec.archive, spec.unwrap) == (
            CHECKSUMS,
            None,
            "tar",
            False,
        )
    assert ollama.install is not None and ollama.install.run is None
    assert ollama.latest is not None and ollama.latest.member == "tag_name"


def test_a_mac_finds_pairs_copy_first_then_the_app_and_the_usual_places() -> None:
    paths = [(c.path, c.which) for c in _engine("ollama", MAC_ARM).detect]
    assert paths[0] == ("{install_dir}/ollama", None), "the tarball has ollama at its root"
    assert (None, "ollama") in paths
    for app in (
        "/Applications/Ollama.app/Contents/Resources/ollama",
        "~/Applications/Ollama.app/Contents/Resources/ollama",
        "/opt/homebrew/bin/ollama",
    ):
        assert (app, None) in paths
    assert not any(path and "\\" in path for path, _ in paths)


@pytest.mark.parametrize(("keys", "arch"), [(WINDOWS_X64, "amd64"), (WINDOWS_ARM, "arm64")])
def test_windows_installs_the_standalone_zip_of_its_machine(
    keys: tuple[str, str], arch: str
) -> None:
    ollama = _engine("ollama", keys)
    for spec in (ollama.install, ollama.update):
        assert spec is not None
        assert spec.url == f"{RELEASES}/ollama-windows-{arch}.zip"
        assert (spec.sha256_url, spec.archive, spec.unwrap) == (CHECKSUMS, "zip", False)
    paths = [(c.path, c.which) for c in ollama.detect]
    assert paths == [
        ("{install_dir}/ollama.exe", None),
        (None, "ollama"),
        ("%LOCALAPPDATA%\\Programs\\Ollama\\ollama.exe", None),
    ]


def test_a_windows_machine_ollama_publishes_nothing_for_has_no_installer() -> None:
    ollama = _engine("ollama", ("windows", "windows/x86"))
    assert ollama.install is None and ollama.update is None
    assert ollama.detect[0].path == "{install_dir}/ollama.exe", "found if installed by hand"


# -- LM Studio --------------------------------------------------------------------------------


@pytest.mark.parametrize("keys", [LINUX_X64, MAC_ARM])
def test_linux_and_macs_run_lm_studios_install_sh(keys: tuple[str, str]) -> None:
    spec = _engine("lmstudio", keys).install
    assert spec is not None
    assert (spec.url, spec.run, spec.archive) == (
        "https://lmstudio.ai/install.sh",
        ["bash", "{download}"],
        None,
    )


@pytest.mark.parametrize("keys", [WINDOWS_X64, WINDOWS_ARM])
def test_windows_runs_llmsters_install_ps1_without_prompts(keys: tuple[str, str]) -> None:
    lmstudio = _engine("lmstudio", keys)
    spec = lmstudio.install
    assert spec is not None and spec.url == "https://lmstudio.ai/install.ps1"
    assert spec.run == [*POWERSHELL, "-File", "{download}"]
    assert lmstudio.download_page == "https://lmstudio.ai/download"
    assert "%USERPROFILE%\\.lmstudio\\bin\\lms.exe" in [c.path for c in lmstudio.detect]
    assert lmstudio.update is None, "LM Studio updates itself"


# -- downloads, modes and detection -----------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "name"),
    [
        ("https://lmstudio.ai/install.ps1", "lmstudio.download.ps1"),
        ("https://lmstudio.ai/install.sh", "lmstudio.download"),
        ("https://ollama.com/download/OllamaSetup.exe", "lmstudio.download.exe"),
        ("https://example.com/Setup%20It.MSI?channel=stable", "lmstudio.download.msi"),
        (f"{RELEASES}/ollama-windows-amd64.zip", "lmstudio.download"),
        ("https://ollama.com/download/ollama-linux-amd64.tgz", "lmstudio.download"),
    ],
)
def test_a_download_to_run_keeps_the_extension_windows_runs_it_by(url: str, name: str) -> None:
    folder = Path("/data/engines")
    assert download_target(folder / "lmstudio", url) == folder / name


def test_only_windows_unpacks_without_file_modes() -> None:
    assert keeps_file_modes("linux") and keeps_file_modes("darwin")
    assert not keeps_file_modes("win32")


def test_windows_counts_any_file_as_runnable_and_unix_needs_the_bit(tmp_path: Path) -> None:
    plain = tmp_path / "ollama.exe"
    plain.write_bytes(b"MZ")
    assert is_executable(plain, "win32") and not is_executable(plain, "linux")
    plain.chmod(0o755)
    assert is_executable(plain, "linux") and is_executable(plain, "darwin")
    assert not is_executable(tmp_path, "win32"), "a folder is never a program"


@pytest.mark.parametrize(
    ("keys", "system_platform", "binary"),
    [(MAC_ARM, "darwin", "ollama"), (WINDOWS_X64, "win32", "ollama.exe")],
)
def test_detect_finds_what_the_archive_put_in_the_install_dir(
    tmp_path: Path, keys: tuple[str, str], system_platform: str, binary: str
) -> None:
    install_dir = tmp_path / "engines" / "ollama"
    (install_dir / "lib").mkdir(parents=True)
    (install_dir / binary).write_bytes(b"")
    (install_dir / binary).chmod(0o755)
    values: dict[str, Any] = {"install_dir": str(install_dir)}
    found = find_executable(_engine("ollama", keys).detect, values, system_platform=system_platform)
    assert found == install_dir / binary
