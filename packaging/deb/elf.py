"""What an ELF file asks of the dynamic linker, read straight from the file (no binutils).

Two uses when packaging the frozen app: the libraries each file needs from the system (for
``Depends``), and search paths that name the build machine (``RUNPATH /root/.pyenv/.../lib``
from a Python built with an rpath), which are rewritten to ``$ORIGIN`` in the staged copy: on a
user's machine such a path is at best missing and at worst someone else's directory.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

_MAGIC = b"\x7fELF"
_SHT_DYNSYM = 11
_SHT_DYNAMIC = 6
_SHT_GNU_VERDEF = 0x6FFFFFFD
_SHT_GNU_VERNEED = 0x6FFFFFFE
_DT_NEEDED = 1
_DT_SONAME = 14
_DT_RPATH = 15
_DT_RUNPATH = 29
# Dynamic tags whose value is an offset into the dynamic string table.
_STRING_TAGS = frozenset({_DT_NEEDED, _DT_SONAME, _DT_RPATH, _DT_RUNPATH, 0x7FFFFFFD, 0x7FFFFFFF})
_GLIBC_VERSION = re.compile(r"GLIBC_(\d+)\.(\d+)(?:\.\d+)?")
ORIGIN = "$ORIGIN"


@dataclass(frozen=True)
class ElfLinks:
    """What one ELF file asks of the dynamic linker."""

    soname: str | None
    needed: tuple[str, ...]
    glibc: tuple[int, int] | None  # the newest GLIBC_x.y symbol version it needs
    search_paths: tuple[str, ...]  # its RPATH and RUNPATH values


@dataclass(frozen=True)
class _Section:
    kind: int
    offset: int
    size: int
    link: int
    info: int


@dataclass(frozen=True)
class _Elf:
    """An open ELF file's byte order, width and section headers."""

    file: BinaryIO
    little: bool
    wide: bool
    sections: tuple[_Section, ...]

    def unpack(self, layout: str, data: bytes, offset: int = 0) -> tuple[int, ...]:
        return struct.unpack_from(("<" if self.little else ">") + layout, data, offset)

    def read(self, offset: int, size: int) -> bytes:
        self.file.seek(offset)
        return self.file.read(size)

    def body(self, section: _Section) -> bytes:
        return self.read(section.offset, section.size)

    def of_kind(self, kind: int) -> Iterator[tuple[_Section, _Section]]:
        """Each section of ``kind`` with the string table it links to."""
        for section in self.sections:
            if section.kind == kind and section.link < len(self.sections):
                yield section, self.sections[section.link]


def _open_elf(file: BinaryIO) -> _Elf | None:
    ident = file.read(16)
    if len(ident) < 16 or ident[:4] != _MAGIC:
        return None
    little, wide = ident[5] == 1, ident[4] == 2
    elf = _Elf(file, little, wide, ())
    header = elf.read(0, 64)
    if wide:
        (table,) = elf.unpack("Q", header, 0x28)
        entry_size, count = elf.unpack("HH", header, 0x3A)
        layout = "IIQQQQIIQQ"
    else:
        (table,) = elf.unpack("I", header, 0x20)
        entry_size, count = elf.unpack("HH", header, 0x2E)
        layout = "IIIIIIIIII"
    data = elf.read(table, entry_size * count)
    sections = []
    for index in range(count):
        fields = elf.unpack(layout, data, index * entry_size)
        sections.append(_Section(fields[1], fields[4], fields[5], fields[6], fields[7]))
    return _Elf(file, little, wide, tuple(sections))


def _dynamic_entries(elf: _Elf, body: bytes) -> Iterator[tuple[int, int, int]]:
    """(offset in the section, tag, value) of each entry up to ``DT_NULL``."""
    layout, size = ("qQ", 16) if elf.wide else ("iI", 8)
    for offset in range(0, len(body) - size + 1, size):
        tag, value = elf.unpack(layout, body, offset)
        if tag == 0:
            return
        yield offset, tag, value


def _string(table: bytes, offset: int) -> str:
    return table[offset : table.index(b"\0", offset)].decode("utf-8", "replace")


def _version_names(elf: _Elf, section: _Section) -> Iterator[int]:
    """String offsets in a version section (``Elf_Verneed`` or ``Elf_Verdef``, 32 or 64 bit)."""
    body = elf.body(section)
    need = 0
    for _ in range(section.info):
        if section.kind == _SHT_GNU_VERNEED:
            _version, count, file_name, aux, following = elf.unpack("HHIII", body, need)
            yield file_name
            name_at, next_at = 8, 12  # Elf_Vernaux: hash, flags, other, name, next
        else:
            *_fields, count, _hash, aux, following = elf.unpack("HHHHIII", body, need)
            name_at, next_at = 0, 4  # Elf_Verdaux: name, next
        entry = need + aux
        for _ in range(count):
            yield elf.unpack("I", body, entry + name_at)[0]
            entry += elf.unpack("I", body, entry + next_at)[0]
        if not following:
            return
        need += following


def newer(one: tuple[int, int] | None, other: tuple[int, int] | None) -> tuple[int, int] | None:
    """The later of two versions, either of which may be unknown."""
    if one is None or other is None:
        return one or other
    return max(one, other)


def read_elf_links(path: Path) -> ElfLinks | None:
    """The sonames ``path`` needs, its own soname and its search paths; None when not ELF."""
    with path.open("rb") as file:
        elf = _open_elf(file)
        if elf is None:
            return None
        needed: list[str] = []
        soname: str | None = None
        paths: list[str] = []
        for section, strings_section in elf.of_kind(_SHT_DYNAMIC):
            strings = elf.body(strings_section)
            for _offset, tag, value in _dynamic_entries(elf, elf.body(section)):
                if tag == _DT_NEEDED:
                    needed.append(_string(strings, value))
                elif tag == _DT_SONAME:
                    soname = _string(strings, value)
                elif tag in (_DT_RPATH, _DT_RUNPATH):
                    paths.append(_string(strings, value))
        glibc: tuple[int, int] | None = None
        for section, strings_section in elf.of_kind(_SHT_GNU_VERNEED):
            strings = elf.body(strings_section)
            for offset in _version_names(elf, section):
                match = _GLIBC_VERSION.fullmatch(_string(strings, offset))
                if match:
                    glibc = newer(glibc, (int(match[1]), int(match[2])))
    return ElfLinks(soname, tuple(needed), glibc, tuple(paths))


def is_foreign(search_path: str) -> bool:
    """Whether a RPATH/RUNPATH names a directory outside the app (anything but ``$ORIGIN...``)."""
    return any(
        not part.startswith((ORIGIN, "${ORIGIN}")) for part in search_path.split(":") if part
    )


def _string_references(elf: _Elf, strings_section: _Section) -> set[int]:
    """Every offset into ``strings_section`` that the dynamic linker reads."""
    index = elf.sections.index(strings_section)
    found: set[int] = set()
    for section, linked in elf.of_kind(_SHT_DYNAMIC):
        if linked == strings_section:
            found.update(
                value
                for _offset, tag, value in _dynamic_entries(elf, elf.body(section))
                if tag in _STRING_TAGS
            )
    size = 24 if elf.wide else 16
    for section in elf.sections:
        if section.link != index:
            continue
        if section.kind == _SHT_DYNSYM:
            body = elf.body(section)
            found.update(elf.unpack("I", body, at)[0] for at in range(0, len(body), size))
        elif section.kind in (_SHT_GNU_VERNEED, _SHT_GNU_VERDEF):
            found.update(_version_names(elf, section))
    return found


def rewrite_foreign_search_paths(path: Path) -> bool:
    """Replace, in place, each RPATH/RUNPATH that names a directory outside the app with
    ``$ORIGIN`` (never an empty one: the linker reads that as the working directory).

    The string is overwritten within its own bytes, so nothing else in the file moves. Returns
    whether anything changed; raises ``ValueError`` when another name shares those bytes.
    """
    changed = False
    with path.open("r+b") as file:
        elf = _open_elf(file)
        if elf is None:
            return False
        for section, strings_section in elf.of_kind(_SHT_DYNAMIC):
            strings = elf.body(strings_section)
            references: set[int] | None = None
            for _offset, tag, value in _dynamic_entries(elf, elf.body(section)):
                if tag not in (_DT_RPATH, _DT_RUNPATH) or not is_foreign(_string(strings, value)):
                    continue
                length = strings.index(b"\0", value) - value
                references = references or _string_references(elf, strings_section)
                if length < len(ORIGIN) or any(value < at < value + length for at in references):
                    raise ValueError(f"{path}: its search path cannot be rewritten in place")
                replacement = ORIGIN.encode().ljust(length, b"\0")
                file.seek(strings_section.offset + value)
                file.write(replacement)
                changed = True
    return changed
