"""The machine id on each OS: macOS's ``ioreg`` output parsed, Windows' registry read through
a fake ``winreg``, and the choice between them by platform (runs on any OS)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import pytest

from backend.components.identity.location import (
    CRYPTOGRAPHY_KEY,
    IOREG_PLATFORM,
    RegistryKey,
    mac_platform_uuid,
    machine_id,
    parse_ioreg_uuid,
    windows_machine_guid,
)

# `ioreg -rd1 -c IOPlatformExpertDevice` on an Apple silicon Mac (serials replaced).
IOREG_APPLE_SILICON = """\
+-o J316sAP  <class IOPlatformExpertDevice, id 0x100000220, registered, matched, active, \
busy 0 (6 ms), retain 41>
    {
      "IOPolledInterface" = "AppleARMWatchdogTimerHibernateHandler is not serializable"
      "#address-cells" = <02000000>
      "AAPL,phandle" = <01000000>
      "serial-number" = <43303258585858585858585800000000000000000000000000000000000000>
      "IOBusyInterest" = "IOCommand is not serializable"
      "target-type" = <"J316s">
      "platform-name" = <7436303030000000000000000000000000000000000000000000000000000000>
      "manufacturer" = <"Apple Inc.">
      "compatible" = <"J316sAP","MacBookPro18,1","AppleARM">
      "IOPlatformSerialNumber" = "C02XXXXXXXXX"
      "model" = <"MacBookPro18,1">
      "IOPlatformUUID" = "3F2504E0-4F89-51D3-9A0C-0305E82C3301"
      "IONWInterrupts" = "IONWInterrupts"
      "device_type" = <"bootrom">
    }
"""

# The same on an Intel Mac: the UUID comes after other keys naming "UUID".
IOREG_INTEL = """\
+-o MacBookPro15,1  <class IOPlatformExpertDevice, id 0x10000020d, registered, matched, \
active, busy 0 (192 ms), retain 38>
    {
      "IOPlatformSystemSleepPolicy" = <534c505402000a00>
      "compatible" = <"MacBookPro15,1">
      "board-id" = <"Mac-937A206F2EE63C01">
      "IOPlatformSerialNumber" = "C02YYYYYYYYY"
      "IOPlatformUUID" = "564D2E5A-8A47-5C3E-B0F6-7C1B8D2A4E90"
      "IOPolledInterface" = "SMCPolledInterface is not serializable"
    }
"""


@pytest.mark.parametrize(
    ("output", "uuid"),
    [
        (IOREG_APPLE_SILICON, "3F2504E0-4F89-51D3-9A0C-0305E82C3301"),
        (IOREG_INTEL, "564D2E5A-8A47-5C3E-B0F6-7C1B8D2A4E90"),
        ('      "IOPlatformSerialNumber" = "C02XXXXXXXXX"\n', None),
        ("", None),
    ],
)
def test_the_platform_uuid_is_read_from_ioreg_output(output: str, uuid: str | None) -> None:
    assert parse_ioreg_uuid(output) == uuid


def test_mac_runs_ioreg_on_the_platform_expert_device() -> None:
    ran: list[Sequence[str]] = []

    def run(argv: Sequence[str]) -> str | None:
        ran.append(argv)
        return IOREG_INTEL

    assert mac_platform_uuid(run) == "564D2E5A-8A47-5C3E-B0F6-7C1B8D2A4E90"
    assert ran == [("/usr/sbin/ioreg", "-rd1", "-c", "IOPlatformExpertDevice")] == [IOREG_PLATFORM]
    assert mac_platform_uuid(lambda argv: None) is None, "ioreg could not run"


@dataclass
class FakeKey:
    values: dict[str, object]

    def __enter__(self) -> RegistryKey:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        return None


@dataclass
class FakeRegistry:
    """``winreg`` with one key; records how it was opened."""

    values: dict[str, object] | None = field(default_factory=dict)
    opened: list[tuple[int, str, int, int]] = field(default_factory=list)
    HKEY_LOCAL_MACHINE: int = 0x80000002
    KEY_READ: int = 0x20019
    KEY_WOW64_64KEY: int = 0x0100

    def OpenKey(self, key: int, sub_key: str, reserved: int, access: int) -> RegistryKey:
        self.opened.append((key, sub_key, reserved, access))
        if self.values is None:
            raise FileNotFoundError(2, "The system cannot find the file specified")
        return FakeKey(self.values)

    def QueryValueEx(self, key: RegistryKey, name: str) -> tuple[object, int]:
        assert isinstance(key, FakeKey)
        if name not in key.values:
            raise FileNotFoundError(2, "The system cannot find the file specified")
        return key.values[name], 1  # REG_SZ


def test_windows_reads_machine_guid_from_the_64_bit_registry_view() -> None:
    registry = FakeRegistry({"MachineGuid": "b5f6e2a1-0c4d-4e8b-9f3a-2d7c1e6b8a90"})

    assert windows_machine_guid(registry) == "b5f6e2a1-0c4d-4e8b-9f3a-2d7c1e6b8a90"
    assert registry.opened == [(0x80000002, r"SOFTWARE\Microsoft\Cryptography", 0, 0x20119)]
    assert CRYPTOGRAPHY_KEY == r"SOFTWARE\Microsoft\Cryptography"


@pytest.mark.parametrize("values", [None, {}, {"MachineGuid": ""}])
def test_a_missing_or_empty_machine_guid_is_unknown(values: dict[str, object] | None) -> None:
    assert windows_machine_guid(FakeRegistry(values)) is None


def test_the_platform_picks_the_reader(tmp_path: Path) -> None:
    machine_file = tmp_path / "machine-id"
    machine_file.write_text("linux-id\n")

    def readers(platform: str) -> str | None:
        return machine_id(
            [machine_file], sys_platform=platform, windows=lambda: "win-id", mac=lambda: "mac-id"
        )

    assert readers("win32") == "win-id"
    assert readers("darwin") == "mac-id"
    assert readers("linux") == "linux-id"
    assert readers("freebsd14") == "linux-id", "other POSIX systems read the machine-id files"
