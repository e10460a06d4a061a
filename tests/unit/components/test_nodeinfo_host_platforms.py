"""The CPU's name on macOS (``sysctl`` output) and the choice of source by platform."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from backend.components.nodeinfo.host import cpu_name, read_sysctl


@pytest.mark.parametrize(
    ("output", "value"),
    [
        ("Apple M1 Pro\n", "Apple M1 Pro"),
        ("Intel(R) Core(TM) i7-8850H CPU @ 2.60GHz\n", "Intel(R) Core(TM) i7-8850H CPU @ 2.60GHz"),
        ("\n", None),
        (None, None),
    ],
)
def test_sysctl_prints_one_value(output: str | None, value: str | None) -> None:
    ran: list[Sequence[str]] = []

    def run(argv: Sequence[str]) -> str | None:
        ran.append(argv)
        return output

    assert read_sysctl("machdep.cpu.brand_string", run) == value
    assert ran == [["/usr/sbin/sysctl", "-n", "machdep.cpu.brand_string"]]


def test_macos_asks_sysctl_for_the_brand_string_and_linux_reads_cpuinfo(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: AMD Ryzen 9 7950X 16-Core Processor\n")
    asked: list[str] = []

    def sysctl(name: str) -> str | None:
        asked.append(name)
        return "Apple M2"

    assert cpu_name(cpuinfo, sys_platform="darwin", sysctl=sysctl) == "Apple M2"
    assert asked == ["machdep.cpu.brand_string"]
    assert cpu_name(cpuinfo, sys_platform="linux", sysctl=sysctl) == (
        "AMD Ryzen 9 7950X 16-Core Processor"
    )
    assert asked == ["machdep.cpu.brand_string"], "Linux never runs sysctl"
