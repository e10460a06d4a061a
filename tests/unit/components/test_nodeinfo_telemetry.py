"""Telemetry readings: AMD sysfs trees, NVML present and absent, CPU, memory; never a fake zero."""

from __future__ import annotations

import json
from collections import namedtuple
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgspec
import psutil
import pynvml
import pytest

from backend.components.nodeinfo.gpus import NvidiaReader, read_amd_gpus
from backend.components.nodeinfo.host import HostReader, busy_percent, parse_cpuinfo_name
from backend.components.nodeinfo.telemetry import Collector
from backend.protocol.types.nodes import NodeGpu

CpuTimes = namedtuple("CpuTimes", "user nice system idle iowait guest guest_nice")


def _card(root: Path, name: str, files: dict[str, str]) -> Path:
    device = root / f"pci-{name}"
    device.mkdir(parents=True)
    for file, text in files.items():
        (device / file).write_text(text + "\n")
    (root / name).mkdir()
    (root / name / "device").symlink_to(device)
    return device


def _encoded(gpu: NodeGpu) -> dict[str, Any]:
    decoded: dict[str, Any] = json.loads(msgspec.json.encode(gpu))
    return decoded


def test_amd_cards_are_read_from_sysfs_and_connectors_are_not_cards(tmp_path: Path) -> None:
    _card(
        tmp_path,
        "card1",
        {
            "vendor": "0x1002",
            "product_name": "Radeon RX 7900 XTX",
            "mem_info_vram_total": "25753026560",
            "mem_info_vram_used": "1073741824",
            "gpu_busy_percent": "37",
        },
    )
    (tmp_path / "card1-DP-1").mkdir()  # a connector, not a card
    (tmp_path / "renderD128").mkdir()
    _card(tmp_path, "card0", {"vendor": "0x1002", "device": "0x164e", "gpu_busy_percent": "0"})
    gpus = read_amd_gpus(tmp_path)
    assert [_encoded(gpu) for gpu in gpus] == [
        {"vendor": "amd", "name": "AMD GPU 0x164e", "utilization_percent": 0.0},
        {
            "vendor": "amd",
            "name": "Radeon RX 7900 XTX",
            "vram_total_bytes": 25753026560,
            "vram_used_bytes": 1073741824,
            "utilization_percent": 37.0,
        },
    ]


def test_unreadable_amd_values_are_omitted_never_zero(tmp_path: Path) -> None:
    _card(
        tmp_path,
        "card0",
        {"mem_info_vram_total": "garbage", "mem_info_vram_used": "-5", "gpu_busy_percent": "250"},
    )
    _card(tmp_path, "card1", {"mem_info_vram_total": "0", "gpu_busy_percent": "12"})
    first, second = read_amd_gpus(tmp_path)
    assert _encoded(first) == {"vendor": "amd"}
    assert _encoded(second) == {"vendor": "amd", "utilization_percent": 12.0}


def test_cards_without_amdgpu_files_and_nvidia_cards_are_not_amd_gpus(tmp_path: Path) -> None:
    _card(tmp_path, "card0", {"vendor": "0x8086", "device": "0x46a6"})  # Intel: no amdgpu files
    _card(tmp_path, "card1", {"vendor": "0x10de", "gpu_busy_percent": "5"})  # NVML reads these
    assert read_amd_gpus(tmp_path) == []
    assert read_amd_gpus(tmp_path / "missing") == []


class _FakeNvml:
    """NVML with two GPUs; the second is a unified-memory GPU without memory or utilisation."""

    class NVMLError(Exception):
        pass

    def __init__(self) -> None:
        self.shutdowns = 0

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, handle: int) -> str | bytes:
        return b"NVIDIA GeForce RTX 4090" if handle == 0 else "NVIDIA GB10"

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        if handle == 1:
            raise self.NVMLError("Not Supported")
        return SimpleNamespace(total=25757220864, used=0, free=25757220864)

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:
        if handle == 1:
            raise self.NVMLError("Not Supported")
        return SimpleNamespace(gpu=0, memory=0)


def test_nvml_devices_are_read_and_each_unsupported_value_is_omitted() -> None:
    nvml = _FakeNvml()
    reader = NvidiaReader(nvml)
    assert reader.start()
    first, second = reader.read()
    assert _encoded(first) == {
        "vendor": "nvidia",
        "name": "NVIDIA GeForce RTX 4090",
        "vram_total_bytes": 25757220864,
        "vram_used_bytes": 0,  # a real reading of an idle GPU, not a placeholder
        "utilization_percent": 0.0,
    }
    assert _encoded(second) == {"vendor": "nvidia", "name": "NVIDIA GB10"}
    reader.close()
    reader.close()
    assert nvml.shutdowns == 1
    assert reader.read() == []


def test_missing_nvml_library_means_no_nvidia_gpus_and_no_exception(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def not_found() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", not_found)
    reader = NvidiaReader()
    assert reader.start() is False
    assert reader.read() == []
    reader.close()


def test_a_computer_without_gpus_samples_an_empty_gpu_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def not_found() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", not_found)
    collector = Collector(host=HostReader(name="Test CPU"), drm_root=tmp_path)
    sample = collector.sample(taken_at=5.0)
    collector.close()
    assert sample.gpus == []
    assert sample.taken_at == 5.0
    assert sample.memory.total_bytes == psutil.virtual_memory().total
    assert sample.cpu.cores == psutil.cpu_count()
    assert sample.cpu.name == "Test CPU"


def test_cpu_utilisation_needs_two_samples_and_is_omitted_before() -> None:
    times = iter(
        [CpuTimes(10, 0, 10, 80, 0, 0, 0), CpuTimes(40, 0, 20, 140, 0, 0, 0)]  # 40 of 100 busy
    )
    reader = HostReader(name=None, cpu_times=lambda: next(times))
    first = reader.cpu()
    assert first.utilization_percent is None
    assert "utilization_percent" not in json.loads(msgspec.json.encode(first))
    assert "name" not in json.loads(msgspec.json.encode(first))
    assert reader.cpu().utilization_percent == 40.0


def test_busy_percent_counts_iowait_as_idle_and_guest_once() -> None:
    before = CpuTimes(100, 0, 0, 100, 0, 0, 0)
    after = CpuTimes(150, 0, 0, 130, 20, 50, 0)  # 50 user of which 50 guest; 20 iowait
    assert busy_percent(before, after) == 50.0
    assert busy_percent(after, after) is None


def test_failing_cpu_times_omit_utilisation() -> None:
    def broken() -> Any:
        raise OSError("no /proc/stat")

    reader = HostReader(name=None, cpu_times=broken)
    reader.cpu()
    assert reader.cpu().utilization_percent is None


@pytest.mark.parametrize(
    ("text", "name"),
    [
        (
            "processor\t: 0\nmodel name\t: AMD Ryzen 9 7950X 16-Core Processor\n",
            "AMD Ryzen 9 7950X 16-Core Processor",
        ),
        (
            "processor\t: 0\nBogoMIPS\t: 48.00\n\nModel\t\t: Raspberry Pi 5 Model B Rev 1.0\n",
            "Raspberry Pi 5 Model B Rev 1.0",
        ),
        ("processor\t: 0\nmodel name\t:\n", None),
        ("", None),
    ],
)
def test_cpu_name_from_proc_cpuinfo(text: str, name: str | None) -> None:
    assert parse_cpuinfo_name(text) == name
