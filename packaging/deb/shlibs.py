"""The Debian packages a frozen folder needs: the shared libraries its ELF files link against that
it does not bundle, mapped to package names.

This is what ``dpkg-shlibdeps`` does for a source package, done without a build tree: each ELF
file's ``DT_NEEDED`` entries and the glibc symbol versions it asks for are read from the file
(``elf.py``), so the build machine need not have those libraries installed.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path

from elf import newer, read_elf_links

# Soname -> Debian package (bookworm names; the later "t64" packages provide these names).
SONAME_PACKAGES: dict[str, str] = {
    **dict.fromkeys(
        ["libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1"], "libc6"
    ),
    **dict.fromkeys(["libresolv.so.2", "libutil.so.1", "libanl.so.1"], "libc6"),
    "libcrypt.so.1": "libcrypt1",
    "libgcc_s.so.1": "libgcc-s1",
    "libstdc++.so.6": "libstdc++6",
    "libz.so.1": "zlib1g",
    "libzstd.so.1": "libzstd1",
    "libbz2.so.1.0": "libbz2-1.0",
    "liblzma.so.5": "liblzma5",
    "libbrotlicommon.so.1": "libbrotli1",
    "libbrotlidec.so.1": "libbrotli1",
    "libexpat.so.1": "libexpat1",
    "libffi.so.8": "libffi8",
    "libssl.so.3": "libssl3",
    "libcrypto.so.3": "libssl3",
    "libsqlite3.so.0": "libsqlite3-0",
    "libuuid.so.1": "libuuid1",
    "libreadline.so.8": "libreadline8",
    "libncursesw.so.6": "libncursesw6",
    "libtinfo.so.6": "libtinfo6",
    "libgdbm.so.6": "libgdbm6",
    "libnsl.so.2": "libnsl2",
    "libtirpc.so.3": "libtirpc3",
    "libgssapi_krb5.so.2": "libgssapi-krb5-2",
    "libdbus-1.so.3": "libdbus-1-3",
    "libcups.so.2": "libcups2",
    **dict.fromkeys(
        [
            "libglib-2.0.so.0",
            "libgobject-2.0.so.0",
            "libgio-2.0.so.0",
            "libgthread-2.0.so.0",
            "libgmodule-2.0.so.0",
        ],
        "libglib2.0-0",
    ),
    "libEGL.so.1": "libegl1",
    "libGL.so.1": "libgl1",
    "libGLX.so.0": "libglx0",
    "libOpenGL.so.0": "libopengl0",
    "libvulkan.so.1": "libvulkan1",
    "libdrm.so.2": "libdrm2",
    "libgbm.so.1": "libgbm1",
    "libfontconfig.so.1": "libfontconfig1",
    "libfreetype.so.6": "libfreetype6",
    "libharfbuzz.so.0": "libharfbuzz0b",
    "libpng16.so.16": "libpng16-16",
    "libxkbcommon.so.0": "libxkbcommon0",
    "libxkbcommon-x11.so.0": "libxkbcommon-x11-0",
    "libX11.so.6": "libx11-6",
    "libX11-xcb.so.1": "libx11-xcb1",
    "libXext.so.6": "libxext6",
    "libXrender.so.1": "libxrender1",
    "libXi.so.6": "libxi6",
    "libSM.so.6": "libsm6",
    "libICE.so.6": "libice6",
    "libxcb.so.1": "libxcb1",
    "libxcb-cursor.so.0": "libxcb-cursor0",
    "libxcb-glx.so.0": "libxcb-glx0",
    "libxcb-icccm.so.4": "libxcb-icccm4",
    "libxcb-image.so.0": "libxcb-image0",
    "libxcb-keysyms.so.1": "libxcb-keysyms1",
    "libxcb-randr.so.0": "libxcb-randr0",
    "libxcb-render.so.0": "libxcb-render0",
    "libxcb-render-util.so.0": "libxcb-render-util0",
    "libxcb-shape.so.0": "libxcb-shape0",
    "libxcb-shm.so.0": "libxcb-shm0",
    "libxcb-sync.so.1": "libxcb-sync1",
    "libxcb-util.so.1": "libxcb-util1",
    "libxcb-xfixes.so.0": "libxcb-xfixes0",
    "libxcb-xinerama.so.0": "libxcb-xinerama0",
    "libxcb-xinput.so.0": "libxcb-xinput0",
    "libxcb-xkb.so.1": "libxcb-xkb1",
    "libwayland-client.so.0": "libwayland-client0",
    "libwayland-cursor.so.0": "libwayland-cursor0",
    "libwayland-egl.so.1": "libwayland-egl1",
    "libwayland-server.so.0": "libwayland-server0",
    "libgtk-3.so.0": "libgtk-3-0",
    "libgdk-3.so.0": "libgtk-3-0",
    "libgdk_pixbuf-2.0.so.0": "libgdk-pixbuf-2.0-0",
    "libpango-1.0.so.0": "libpango-1.0-0",
    "libpangocairo-1.0.so.0": "libpangocairo-1.0-0",
    "libatk-1.0.so.0": "libatk1.0-0",
    "libcairo.so.2": "libcairo2",
    "libcairo-gobject.so.2": "libcairo-gobject2",
}
# Qt plugins that PAIR's desktop use never needs: Qt loads plugins on demand and falls back when
# one fails to load, so their libraries are recommended, not required (the GTK theme, embedded
# and kiosk platforms, the Wayland compositor side).
OPTIONAL_PLUGINS = (
    "*/platformthemes/libqgtk3.so",
    "*/egldeviceintegrations/*",
    "*/platforms/libqeglfs.so",
    "*/platforms/libqminimalegl.so",
    "*/platforms/libqlinuxfb.so",
    "*/platforms/libqvkkhrdisplay.so",
    "*/wayland-graphics-integration-server/*",
)


@dataclass(frozen=True)
class PackageRelations:
    """The ``Depends`` and ``Recommends`` fields of ``DEBIAN/control``."""

    depends: tuple[str, ...]
    recommends: tuple[str, ...]


class UnknownLibraryError(Exception):
    """A needed library is neither bundled nor in ``SONAME_PACKAGES``."""


def package_relations(folder: Path) -> PackageRelations:
    """The packages the ELF files under ``folder`` need from the system.

    Raises ``UnknownLibraryError`` for a library that is neither bundled nor known, since a
    package without it would install and then fail to start.
    """
    links = {path: read_elf_links(path) for path in _regular_files(folder)}
    bundled = {path.name for path in links} | {
        link.soname for link in links.values() if link and link.soname
    }
    required: set[str] = set()
    optional: set[str] = set()
    glibc: tuple[int, int] | None = None
    for path, link in links.items():
        if link is None:
            continue
        strength = optional if _is_optional(path, folder) else required
        strength.update(name for name in link.needed if name not in bundled)
        if strength is required:
            glibc = newer(glibc, link.glibc)
    depends = _packages(required, glibc)
    recommends = tuple(sorted(set(_packages(optional - required, None)) - set(depends)))
    return PackageRelations(depends=depends, recommends=recommends)


def _packages(sonames: set[str], glibc: tuple[int, int] | None) -> tuple[str, ...]:
    unknown = sorted(name for name in sonames if _package(name) is None)
    if unknown:
        raise UnknownLibraryError(
            f"no Debian package known for {', '.join(unknown)}: add it to SONAME_PACKAGES"
        )
    packages = {_package(name) or "" for name in sonames}
    if glibc:
        packages.add("libc6")
    return tuple(
        f"libc6 (>= {glibc[0]}.{glibc[1]})" if name == "libc6" and glibc else name
        for name in sorted(packages)
    )


def _package(soname: str) -> str | None:
    # The dynamic linker's own name differs per architecture (ld-linux-x86-64.so.2, ...).
    if soname.startswith(("ld-linux", "ld64.so")):
        return "libc6"
    return SONAME_PACKAGES.get(soname)


def _is_optional(path: Path, folder: Path) -> bool:
    relative = "/" + path.relative_to(folder).as_posix()
    return any(fnmatch.fnmatchcase(relative, pattern) for pattern in OPTIONAL_PLUGINS)


def _regular_files(folder: Path) -> list[Path]:
    return sorted(path for path in folder.rglob("*") if path.is_file() and not path.is_symlink())
