"""Build ``build/pair_<version>-<revision>_<arch>.deb`` from the frozen app (PyInstaller's folder).

Usage: ``python packaging/deb/build_deb.py [FROZEN_FOLDER] [--output-dir DIR]`` (default
``build/frozen/pair``, written to ``build/``). Needs ``dpkg-deb``; never the network.

The package holds the app in ``/usr/lib/pair`` with ``/usr/bin/pair`` linked to it, the desktop
entry, the hicolor icons, the systemd user unit for a headless node, a man page and the
copyright and changelog. Its one maintainer script, ``prerm``, stops the PAIR processes that
run from the package's files before a removal deletes them; dpkg's file triggers refresh the icon
cache and the desktop database, and removing the package leaves every user's data alone.

The staged copy of the app differs from the frozen folder in one way: library search paths that
name the build machine (a Python built with an rpath) are rewritten to ``$ORIGIN`` (``elf.py``).
"""

from __future__ import annotations

import argparse
import email.utils
import gzip
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from elf import rewrite_foreign_search_paths  # noqa: E402
from shlibs import PackageRelations, UnknownLibraryError, package_relations  # noqa: E402

from backend.common.buildinfo import VERSION  # noqa: E402

PACKAGE = "pair"
INSTALL_DIR = Path("usr/lib/pair")
DEFAULT_FROZEN = ROOT / "build" / "frozen" / "pair"
DEFAULT_OUTPUT = ROOT / "build"
# A placeholder until the project publishes a contact address; override with --maintainer.
DEFAULT_MAINTAINER = "PAIR maintainers <maintainers@pair-router.invalid>"
# xz at level 1 rather than dpkg-deb's 6: on the frozen app (about 150 MB, mostly Qt's shared
# libraries) level 6 spent about 100 s of CPU for a 46 MB package, level 1 spends about a fifth
# of that for 51 MB; a build on a laptop or in CI is minutes shorter for a tenth more download.
COMPRESSION = ("-Zxz", "-z1")


@dataclass(frozen=True)
class PackageInfo:
    """What ``DEBIAN/control`` and the docs say about this build."""

    upstream_version: str  # PAIR's, in dpkg's ordering
    revision: str  # of the packaging, for a rebuild of one PAIR version
    architecture: str
    maintainer: str
    date: datetime

    @property
    def version(self) -> str:
        """The package's version: ``0.1.0-1``."""
        return f"{self.upstream_version}-{self.revision}"


def debian_version(version: str) -> str:
    """A PEP 440 version as dpkg orders it: pre-releases and dev builds sort before the release."""
    return re.sub(r"[.-]?(a|b|rc|dev)(\d+)", r"~\1\2", version)


def build_date() -> datetime:
    """``SOURCE_DATE_EPOCH`` when set (reproducible builds), else now."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    return datetime.fromtimestamp(int(epoch) if epoch else time.time(), tz=UTC)


def dpkg_architecture() -> str:
    """This machine's Debian architecture (``amd64``, ``arm64``, ...)."""
    result = subprocess.run(
        ["dpkg", "--print-architecture"], check=True, capture_output=True, text=True
    )
    return result.stdout.strip()


def fill(template: str, **values: str) -> str:
    """``template`` with each ``{name}`` replaced (plain replacement: the files hold braces)."""
    for name, value in values.items():
        template = template.replace(f"{{{name}}}", value)
    return template


def stage_app(frozen: Path, stage: Path) -> None:
    """Copy the frozen folder to ``/usr/lib/pair`` and link ``/usr/bin/pair`` to its launcher."""
    executable = frozen / PACKAGE
    if not (executable.is_file() and os.access(executable, os.X_OK)):
        raise FileNotFoundError(f"{executable} is not an executable: build the frozen app first")
    shutil.copytree(frozen, stage / INSTALL_DIR, symlinks=True)
    bin_dir = stage / "usr" / "bin"
    bin_dir.mkdir(parents=True)
    # Relative, as Debian policy asks of links within one top-level directory.
    (bin_dir / PACKAGE).symlink_to(Path("..") / "lib" / PACKAGE / PACKAGE)


def stage_desktop(stage: Path) -> None:
    """The menu entry and the icons (rendered by Qt in a child process)."""
    applications = stage / "usr" / "share" / "applications"
    applications.mkdir(parents=True)
    shutil.copyfile(HERE / "pair.desktop", applications / "pair.desktop")
    subprocess.run(
        [sys.executable, str(HERE.parent / "icons.py"), str(stage)],
        check=True,
        stdout=subprocess.DEVNULL,
    )


def systemd_unit(source: str) -> str:
    """The headless node's user unit, running the installed command."""
    unit, count = re.subn(r"^ExecStart=.*$", "ExecStart=/usr/bin/pair node", source, flags=re.M)
    if count != 1:
        raise ValueError("pair-node.service should have exactly one ExecStart line")
    # The source's install hints are for a copy in ~/.config; packaged, it only needs enabling.
    lines = [line for line in unit.splitlines() if not line.startswith(("# Install:", "# `pair`"))]
    lines.insert(1, "# Enable: systemctl --user enable --now pair-node")
    return "\n".join(lines) + "\n"


def stage_unit(stage: Path) -> None:
    """``/usr/lib/systemd/user/pair-node.service``."""
    source = (ROOT / "packaging" / "systemd" / "pair-node.service").read_text(encoding="utf-8")
    units = stage / "usr" / "lib" / "systemd" / "user"
    units.mkdir(parents=True)
    (units / "pair-node.service").write_text(systemd_unit(source), encoding="utf-8")


def changelog(info: PackageInfo) -> str:
    """A one-entry ``changelog.Debian`` for this build."""
    stamp = email.utils.format_datetime(info.date)
    return (
        f"{PACKAGE} ({info.version}) unstable; urgency=medium\n\n"
        f"  * PAIR {info.upstream_version}, packaged from the frozen app.\n\n"
        f" -- {info.maintainer}  {stamp}\n"
    )


def gzip_bytes(data: bytes) -> bytes:
    """``gzip -9n``: best compression, no name or time in the header (reproducible)."""
    return gzip.compress(data, compresslevel=9, mtime=0)


def stage_docs(stage: Path, info: PackageInfo) -> None:
    """Copyright, changelog, man page and lintian overrides."""
    doc = stage / "usr" / "share" / "doc" / PACKAGE
    doc.mkdir(parents=True)
    copyright_text = (HERE / "copyright").read_text(encoding="utf-8")
    (doc / "copyright").write_text(fill(copyright_text, maintainer=info.maintainer))
    (doc / "changelog.Debian.gz").write_bytes(gzip_bytes(changelog(info).encode()))
    man = stage / "usr" / "share" / "man" / "man1"
    man.mkdir(parents=True)
    page = fill((HERE / "pair.1").read_text(encoding="utf-8"), version=info.upstream_version)
    (man / "pair.1.gz").write_bytes(gzip_bytes(page.encode()))
    overrides = stage / "usr" / "share" / "lintian" / "overrides"
    overrides.mkdir(parents=True)
    shutil.copyfile(HERE / "lintian-overrides", overrides / PACKAGE)


def _walk(stage: Path) -> Iterator[Path]:
    for directory, subdirectories, files in os.walk(stage):
        subdirectories.sort()
        for name in [*subdirectories, *sorted(files)]:
            yield Path(directory) / name


def is_shared_library(path: Path) -> bool:
    """A ``.so`` file by name (Python extensions, Qt libraries and plugins)."""
    return ".so" in path.suffixes or path.name.endswith(".so")


def is_executable(path: Path) -> bool:
    """A file with an execute bit that is not a shared library (libraries are loaded, not run)."""
    return bool(path.stat().st_mode & 0o111) and not is_shared_library(path)


def normalize_modes(stage: Path) -> None:
    """Directories 0755; executables 0755; everything else, shared libraries included, 0644."""
    stage.chmod(0o755)
    for path in _walk(stage):
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() or is_executable(path) else 0o644)


def rewrite_search_paths(app: Path) -> list[Path]:
    """Point the build machine's library search paths in the staged app at ``$ORIGIN``."""
    files = sorted(path for path in app.rglob("*") if path.is_file() and not path.is_symlink())
    return [path for path in files if rewrite_foreign_search_paths(path)]


def clamp_times(stage: Path, date: datetime) -> None:
    """Every file's time set to the build date, so two builds of one tree are byte-identical."""
    stamp = date.timestamp()
    for path in [*_walk(stage), stage]:
        os.utime(path, (stamp, stamp), follow_symlinks=False)


def installed_size(stage: Path) -> int:
    """The ``Installed-Size`` field: KiB, each file rounded up, each directory one KiB."""
    total = 0
    for path in _walk(stage):
        if path.is_dir() and not path.is_symlink():
            total += 1
        elif not path.is_symlink():
            total += -(-path.stat().st_size // 1024)
    return total


def control(info: PackageInfo, relations: PackageRelations, size: int) -> str:
    """``DEBIAN/control``."""
    text = fill(
        (HERE / "control.in").read_text(encoding="utf-8"),
        version=info.version,
        architecture=info.architecture,
        maintainer=info.maintainer,
        installed_size=str(size),
        depends=", ".join(relations.depends),
        recommends=", ".join(relations.recommends),
    )
    # A field with nothing to say is left out rather than left empty.
    return "".join(line for line in text.splitlines(keepends=True) if not line.endswith(": \n"))


def md5sums(stage: Path) -> str:
    """``DEBIAN/md5sums``: every regular file, as ``dpkg --verify`` reads it."""
    lines = []
    for path in _walk(stage):
        if path.is_file() and not path.is_symlink():
            digest = hashlib.md5(path.read_bytes(), usedforsecurity=False).hexdigest()
            lines.append(f"{digest}  {path.relative_to(stage).as_posix()}\n")
    return "".join(lines)


def write_metadata(stage: Path, info: PackageInfo) -> None:
    """``DEBIAN/control`` and ``DEBIAN/md5sums``, from the staged tree, and the ``prerm``."""
    relations = package_relations(stage / INSTALL_DIR)
    size = installed_size(stage)
    sums = md5sums(stage)
    debian = stage / "DEBIAN"
    debian.mkdir(mode=0o755)
    (debian / "control").write_text(control(info, relations, size), encoding="utf-8")
    (debian / "md5sums").write_text(sums, encoding="utf-8")
    for path in debian.iterdir():
        path.chmod(0o644)
    shutil.copyfile(HERE / "prerm", debian / "prerm")
    (debian / "prerm").chmod(0o755)


def build_deb(frozen: Path, output_dir: Path, info: PackageInfo) -> Path:
    """Stage the package tree from ``frozen`` and build the ``.deb`` in ``output_dir``."""
    output_dir.mkdir(parents=True, exist_ok=True)
    deb = output_dir / f"{PACKAGE}_{info.version}_{info.architecture}.deb"
    with tempfile.TemporaryDirectory(prefix="pair-deb-", dir=output_dir) as scratch:
        stage = Path(scratch) / "root"
        stage_app(frozen, stage)
        stage_desktop(stage)
        stage_unit(stage)
        stage_docs(stage, info)
        normalize_modes(stage)
        rewrite_search_paths(stage / INSTALL_DIR)
        write_metadata(stage, info)
        clamp_times(stage, info.date)
        subprocess.run(
            ["dpkg-deb", "--build", "--root-owner-group", *COMPRESSION, str(stage), str(deb)],
            check=True,
            stdout=subprocess.DEVNULL,
            env={**os.environ, "SOURCE_DATE_EPOCH": str(int(info.date.timestamp()))},
        )
    return deb


def main(argv: list[str] | None = None) -> int:
    """Build the package and print its path."""
    parser = argparse.ArgumentParser(description="Build the PAIR .deb from the frozen app.")
    parser.add_argument("frozen", nargs="?", type=Path, default=DEFAULT_FROZEN)
    parser.add_argument("--output-dir", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--maintainer", default=DEFAULT_MAINTAINER, help="'Name <address>'")
    parser.add_argument("--revision", default="1", help="the packaging's revision (default 1)")
    options = parser.parse_args(argv)
    info = PackageInfo(
        upstream_version=debian_version(VERSION),
        revision=options.revision,
        architecture=dpkg_architecture(),
        maintainer=options.maintainer,
        date=build_date(),
    )
    try:
        deb = build_deb(options.frozen.resolve(), options.output_dir.resolve(), info)
    except (OSError, UnknownLibraryError, ValueError, subprocess.CalledProcessError) as error:
        print(f"build_deb: {error}", file=sys.stderr)
        return 1
    print(deb)
    return 0


if __name__ == "__main__":
    sys.exit(main())
