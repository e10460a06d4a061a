"""The Linux package built by packaging/deb/build_deb.py: from a stand-in frozen folder (a shell
script as ``pair``), read back with ``dpkg-deb`` and checked with ``lintian``; and, when the real
frozen build exists in ``build/frozen/pair``, that package unpacked and smoke-tested.

``dpkg-deb`` and ``lintian`` missing skip their tests, unless ``PAIR_REQUIRE_PACKAGING=1`` (CI),
which makes that a failure; so does a missing frozen build.
"""

from __future__ import annotations

import configparser
import gzip
import hashlib
import importlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest
from PySide6.QtGui import QImage

from backend.common.buildinfo import VERSION
from tests.packaging.conftest import DEB_DIR, FROZEN_GROUP, run_lock

ROOT = Path(__file__).resolve().parents[2]
BUILD_DEB = ROOT / "packaging" / "deb" / "build_deb.py"
SMOKE = ROOT / "packaging" / "smoke.py"
REQUIRED = os.environ.get("PAIR_REQUIRE_PACKAGING") == "1"
EPOCH = "1764547200"  # 2025-12-01: a fixed build date, for reproducible packages
ICON_SIZES = (16, 22, 24, 32, 48, 64, 128, 256, 512)
FAKE_VERSION = "pair 0.0.0-stand-in"
BUILD_TIMEOUT_S = 600
LINTIAN_TIMEOUT_S = 900
SMOKE_TIMEOUT_S = 300
EXTRACT_TIMEOUT_S = 300
FIELD_TIMEOUT_S = 60

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the .deb is built on Linux")


def _unavailable(reason: str) -> None:
    if REQUIRED:
        pytest.fail(f"{reason}, and PAIR_REQUIRE_PACKAGING=1")
    pytest.skip(reason)


def _tool(name: str, package: str) -> str:
    found = shutil.which(name)
    if found is None:
        _unavailable(f"{name} is not installed (apt-get install {package})")
    assert found is not None
    return found


def _run(*argv: str | Path, timeout: float = 60) -> str:
    done = subprocess.run(
        [str(arg) for arg in argv], capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{argv} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def build(frozen: Path, output: Path) -> Path:
    """Run the build script as CI does; return the package it printed."""
    _tool("dpkg-deb", "dpkg")
    done = subprocess.run(
        [sys.executable, str(BUILD_DEB), str(frozen), "--output-dir", str(output)],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        env={**os.environ, "SOURCE_DATE_EPOCH": EPOCH},
        check=False,
    )
    assert done.returncode == 0, f"build_deb failed:\n{done.stdout}\n{done.stderr}"
    return Path(done.stdout.strip().splitlines()[-1])


def lintian(deb: Path) -> str:
    """Lintian's report (errors fail the test; warnings are printed, and overridden if expected)."""
    lintian_path = _tool("lintian", "lintian")
    done = subprocess.run(
        # Not --show-overrides: lintian then counts overridden errors towards --fail-on.
        [lintian_path, "--fail-on", "error", "--display-info", str(deb)],
        capture_output=True,
        text=True,
        timeout=LINTIAN_TIMEOUT_S,
        check=False,
    )
    print(done.stdout, done.stderr)
    errors = [line for line in done.stdout.splitlines() if line.startswith("E: ")]
    assert done.returncode == 0 and not errors, done.stdout + done.stderr
    return done.stdout


@dataclass(frozen=True)
class Entry:
    """One line of ``dpkg-deb --contents``."""

    mode: str
    owner: str
    path: str  # without the leading "./"
    target: str | None  # of a symbolic link


def contents(deb: Path) -> dict[str, Entry]:
    entries = {}
    for line in _run("dpkg-deb", "--contents", deb).splitlines():
        mode, owner, _size, _date, _time, name = line.split(maxsplit=5)
        name, _arrow, target = name.partition(" -> ")
        path = name.removeprefix("./").rstrip("/")
        entries[path] = Entry(mode, owner, path, target or None)
    return entries


def _fake_frozen(root: Path) -> Path:
    """A stand-in for PyInstaller's folder: an executable ``pair`` and some of its files."""
    folder = root / "pair"
    (folder / "_internal").mkdir(parents=True)
    (folder / "pair").write_text(f'#!/bin/sh\necho "{FAKE_VERSION}"\n')
    (folder / "pair").chmod(0o700)
    (folder / "_internal" / "helper").write_text("#!/bin/sh\nexit 0\n")
    (folder / "_internal" / "helper").chmod(0o750)
    (folder / "_internal" / "base_library.zip").write_bytes(b"PK\x05\x06" + bytes(18))
    (folder / "_internal" / "base_library.zip").chmod(0o600)
    return folder


@pytest.fixture(scope="module")
def fake_deb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("deb")
    return build(_fake_frozen(root / "frozen"), root / "out")


@pytest.fixture(scope="module")
def unpacked(fake_deb: Path) -> Path:
    """The package's files (``dpkg-deb -x``) and its control files under ``DEBIAN``."""
    tree = fake_deb.parent / "unpacked"
    _run("dpkg-deb", "--extract", fake_deb, tree)
    _run("dpkg-deb", "--control", fake_deb, tree / "DEBIAN")
    return tree


def _field(deb: Path, name: str) -> str:
    return _run("dpkg-deb", "--field", deb, name, timeout=FIELD_TIMEOUT_S).strip()


def test_the_package_is_named_by_version_and_architecture(fake_deb: Path) -> None:
    architecture = _run("dpkg", "--print-architecture").strip()
    assert fake_deb.name == f"pair_{VERSION}-1_{architecture}.deb"
    assert _field(fake_deb, "Package") == "pair"
    assert _field(fake_deb, "Version") == f"{VERSION}-1"
    assert _field(fake_deb, "Architecture") == architecture


def test_control_fields(fake_deb: Path) -> None:
    assert _field(fake_deb, "Section") == "net"
    assert _field(fake_deb, "Priority") == "optional"
    assert "<" in _field(fake_deb, "Maintainer")
    assert int(_field(fake_deb, "Installed-Size")) > 0
    description = _field(fake_deb, "Description").splitlines()
    assert description[0].startswith("Personal AI Router")
    assert len(description) > 5, "a long description follows the synopsis"
    # No ELF file in the stand-in: nothing needed from the system.
    assert _field(fake_deb, "Depends") == ""


def test_the_one_maintainer_script_is_the_prerm(unpacked: Path) -> None:
    assert sorted(path.name for path in (unpacked / "DEBIAN").iterdir()) == [
        "control",
        "md5sums",
        "prerm",
    ]
    assert (unpacked / "DEBIAN" / "prerm").stat().st_mode & 0o777 == 0o755


def test_install_and_purge_leave_user_data_alone(fake_deb: Path, tmp_path: Path) -> None:
    # A private dpkg database under tmp_path: the system's packages are never touched.
    root = tmp_path / "root"
    (root / "var" / "lib" / "dpkg" / "updates").mkdir(parents=True)
    (root / "var" / "lib" / "dpkg" / "status").touch()
    user_files = [
        root / "home" / "user" / ".local" / "share" / "pair" / "identity.json",
        root / "home" / "user" / ".config" / "autostart" / "pair.desktop",
        root / "home" / "user" / ".config" / "systemd" / "user" / "pair-node.service",
    ]
    for path in user_files:
        path.parent.mkdir(parents=True)
        path.write_text("the user's\n")
    # Chrootless: the root holds no shell for the prerm (dpkg tells it the root as DPKG_ROOT).
    dpkg = [
        "dpkg",
        f"--root={root}",
        "--force-not-root",
        "--force-depends",
        "--force-script-chrootless",
        "--log=/dev/null",
    ]
    _run(*dpkg, "--install", fake_deb)
    assert (root / "usr" / "bin" / "pair").is_symlink()
    assert (root / "usr" / "lib" / "pair" / "pair").is_file()
    _run(*dpkg, "--purge", "pair")
    left = {path for path in root.rglob("*") if "dpkg" not in path.relative_to(root).parts}
    assert {path for path in left if path.is_file()} == set(user_files)
    assert not (root / "usr").exists(), "every file of the package is gone"


def test_every_entry_is_root_owned_with_policy_modes(fake_deb: Path) -> None:
    entries = contents(fake_deb)
    executables = {"usr/lib/pair/pair", "usr/lib/pair/_internal/helper"}
    for entry in entries.values():
        assert entry.owner == "root/root", entry
        if entry.target is not None:
            assert entry.mode.startswith("l"), entry
        elif entry.mode.startswith("d"):
            assert entry.mode == "drwxr-xr-x", entry
        elif entry.path in executables:
            assert entry.mode == "-rwxr-xr-x", entry
        else:
            assert entry.mode == "-rw-r--r--", entry


def test_the_app_commands_entry_icons_unit_and_docs_are_installed(fake_deb: Path) -> None:
    entries = contents(fake_deb)
    expected = {
        "usr/lib/pair/pair",
        "usr/lib/pair/_internal/base_library.zip",
        "usr/bin/pair",
        "usr/share/applications/pair.desktop",
        "usr/share/icons/hicolor/scalable/apps/pair.svg",
        "usr/lib/systemd/user/pair-node.service",
        "usr/share/doc/pair/copyright",
        "usr/share/doc/pair/changelog.Debian.gz",
        "usr/share/man/man1/pair.1.gz",
        "usr/share/lintian/overrides/pair",
    } | {f"usr/share/icons/hicolor/{size}x{size}/apps/pair.png" for size in ICON_SIZES}
    assert expected <= set(entries)
    assert entries["usr/bin/pair"].target == "../lib/pair/pair"
    assert not [path for path in entries if path.startswith(("home", "etc", "root", "opt"))]


def test_the_command_runs_the_app(unpacked: Path) -> None:
    command = unpacked / "usr" / "bin" / "pair"
    assert command.resolve() == (unpacked / "usr" / "lib" / "pair" / "pair").resolve()
    assert _run(command).strip() == FAKE_VERSION


def _desktop_entry(path: Path) -> configparser.SectionProxy:
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
    parser.read(path, encoding="utf-8")
    return parser["Desktop Entry"]


def test_the_desktop_entry_starts_pair_with_its_icon(unpacked: Path) -> None:
    path = unpacked / "usr" / "share" / "applications" / "pair.desktop"
    fields = _desktop_entry(path)
    assert fields["Type"] == "Application"
    assert fields["Name"] == "PAIR"
    assert fields["Exec"] == "pair"
    assert fields["Icon"] == "pair"
    assert fields["Categories"] == "Network;Utility;"
    assert fields["Terminal"] == "false"
    assert fields["StartupWMClass"] == "PAIR"  # the app's window class: its windows join the entry
    validate = shutil.which("desktop-file-validate")
    if validate is None:
        pytest.skip("desktop-file-validate is not installed (apt-get install desktop-file-utils)")
    report = _run(validate, path)  # exit code 0: no errors (hints may be printed)
    assert "error:" not in report, report


@pytest.mark.parametrize("size", ICON_SIZES)
def test_each_hicolor_icon_is_a_png_of_its_size(unpacked: Path, size: int) -> None:
    path = unpacked / f"usr/share/icons/hicolor/{size}x{size}/apps/pair.png"
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    image = QImage.fromData(data)
    assert (image.width(), image.height()) == (size, size)
    assert image.hasAlphaChannel()
    assert image.pixelColor(0, 0).alpha() == 0, "the corners are transparent"


def test_the_user_unit_runs_the_installed_command(unpacked: Path) -> None:
    unit = (unpacked / "usr/lib/systemd/user/pair-node.service").read_text()
    service = configparser.ConfigParser(interpolation=None, strict=False)
    service.optionxform = str  # type: ignore[assignment,method-assign]
    service.read_string(unit)
    assert service["Service"]["ExecStart"] == "/usr/bin/pair node"
    assert service["Install"]["WantedBy"] == "default.target"
    assert "%h" not in unit and ".local/bin" not in unit


def _gzip_member(path: Path) -> str:
    data = path.read_bytes()
    assert data[:3] == b"\x1f\x8b\x08"
    assert data[3] & 0x08 == 0, "no file name in the header (gzip -n)"
    assert data[4:8] == bytes(4), "no time in the header (gzip -n)"
    return gzip.decompress(data).decode()


def test_copyright_changelog_and_man_page(unpacked: Path) -> None:
    doc = unpacked / "usr" / "share" / "doc" / "pair"
    copyright_text = (doc / "copyright").read_text()
    assert copyright_text.startswith(
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n"
    )
    for mention in ("License: Apache-2.0", "Qt", "License: LGPL-3", "License: PSF-2.0"):
        assert mention in copyright_text
    changelog = _gzip_member(doc / "changelog.Debian.gz")
    assert changelog.startswith(f"pair ({VERSION}-1) unstable; urgency=medium\n")
    assert "Mon, 01 Dec 2025 00:00:00 +0000" in changelog, "dated SOURCE_DATE_EPOCH"
    page = _gzip_member(unpacked / "usr" / "share" / "man" / "man1" / "pair.1.gz")
    assert page.startswith(f'.TH PAIR 1 "" "PAIR {VERSION}"')


def test_md5sums_list_every_file(unpacked: Path) -> None:
    listed = {}
    for line in (unpacked / "DEBIAN" / "md5sums").read_text().splitlines():
        digest, path = line.split("  ", 1)
        listed[path] = digest
    files = {
        path.relative_to(unpacked).as_posix(): hashlib.md5(path.read_bytes()).hexdigest()
        for path in unpacked.rglob("*")
        if path.is_file() and not path.is_symlink() and "DEBIAN" not in path.parts
    }
    assert listed == files


def test_two_builds_of_one_folder_are_identical(fake_deb: Path, tmp_path: Path) -> None:
    again = build(_fake_frozen(tmp_path / "frozen"), tmp_path / "out")
    assert again.read_bytes() == fake_deb.read_bytes()


def test_lintian_finds_no_errors(fake_deb: Path) -> None:
    lintian(fake_deb)


def _build_deb_module() -> ModuleType:
    """packaging/deb/build_deb.py as a module (a folder of scripts, not a package)."""
    if str(BUILD_DEB.parent) not in sys.path:
        sys.path.insert(0, str(BUILD_DEB.parent))
    return importlib.import_module("build_deb")


@pytest.mark.parametrize(
    ("version", "debian", "release"),
    [
        ("0.1.0", "0.1.0", "0.1.0"),
        ("0.2.0rc1", "0.2.0~rc1", "0.2.0"),
        ("0.2.0b2", "0.2.0~b2", "0.2.0"),
        ("1.0.dev3", "1.0~dev3", "1.0"),
    ],
)
def test_pre_releases_sort_before_their_release(version: str, debian: str, release: str) -> None:
    assert _build_deb_module().debian_version(version) == debian
    if debian != release:
        _run("dpkg", "--compare-versions", debian, "lt", release)


def test_a_missing_frozen_folder_is_reported(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(BUILD_DEB), str(tmp_path / "nothing"), "--output-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert "is not an executable: build the frozen app first" in done.stderr
    assert not list(tmp_path.glob("*.deb"))


# The real frozen app, when build/frozen/pair holds it (packaging/build_frozen.py).


@pytest.fixture(scope="session")
def real_deb(frozen_pair: Path) -> Path:
    """The package ``packaging/deb/build_deb.py`` makes of the frozen build, once per run (in
    ``build/deb``, which each run's package replaces)."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    stamp = DEB_DIR / "built-for-run"
    DEB_DIR.mkdir(parents=True, exist_ok=True)
    with run_lock(DEB_DIR.parent / "deb.lock"):
        built = sorted(DEB_DIR.glob("*.deb"))
        if run and len(built) == 1 and stamp.exists() and stamp.read_text() == run:
            return built[0]
        stamp.unlink(missing_ok=True)
        for old in built:
            old.unlink()
        deb = build(frozen_pair.parent, DEB_DIR)
        print(f"{deb.name}: {deb.stat().st_size / 2**20:.1f} MiB")
        if run:
            stamp.write_text(run)
    return deb


# The real package's tests time their bodies only: the setup (the frozen build, perhaps waited
# for, and the package's build) is bounded by the fixtures' own timeouts (conftest.py). They run
# on the worker that builds the frozen app (FROZEN_GROUP), which then makes their package.
@pytest.mark.slow
@pytest.mark.xdist_group(FROZEN_GROUP)
@pytest.mark.timeout(LINTIAN_TIMEOUT_S + 30, func_only=True)
def test_the_real_package_passes_lintian(real_deb: Path) -> None:
    lintian(real_deb)


@pytest.mark.slow
@pytest.mark.xdist_group(FROZEN_GROUP)
@pytest.mark.timeout(EXTRACT_TIMEOUT_S + FIELD_TIMEOUT_S + SMOKE_TIMEOUT_S + 30, func_only=True)
def test_the_real_package_unpacked_passes_the_smoke_test(real_deb: Path, tmp_path: Path) -> None:
    if not SMOKE.is_file():
        _unavailable("packaging/smoke.py does not exist yet")
    _run("dpkg-deb", "--extract", real_deb, tmp_path / "root", timeout=EXTRACT_TIMEOUT_S)
    executable = tmp_path / "root" / "usr" / "lib" / "pair" / "pair"
    assert "libc6 (>= 2." in _field(real_deb, "Depends")
    done = subprocess.run(
        [sys.executable, str(SMOKE), str(executable)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=SMOKE_TIMEOUT_S,
        check=False,
    )
    print(done.stdout)
    assert done.returncode == 0, f"smoke test failed:\n{done.stdout}\n{done.stderr}"
    assert "smoke: passed" in done.stdout
