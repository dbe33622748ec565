"""A recorded healthy 2×H100 node as a FixtureProbe, and helpers to break one thing at a time.

The texts are fixture files in ``fixtures/``: ``nvidia-smi -q`` output, /proc and /sys files
(``meminfo-24g.txt`` and ``cgroup-v1/`` were captured on the CI machine).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuwise.doctor import CommandOutput, DiskUsage, FixtureProbe, TorchInfo, parse_nvidia_smi_q

FIXTURES = Path(__file__).parent / "fixtures"
GIB = 1024**3


def fixture_text(name: str) -> str:
    return (FIXTURES / name).read_text("utf-8")


def h100_text(*replacements: tuple[str, str], count: int = 1) -> str:
    """The healthy 2×H100 ``nvidia-smi -q`` text with ``old → new`` applied to the first ``count`` GPU(s)."""
    text = fixture_text("nvidia-smi/h100x2-healthy.txt")
    for old, new in replacements:
        assert old in text, old
        text = text.replace(old, new, count)
    return text


def _pci(addr: str, vendor: str, klass: str) -> dict[str, str]:
    return {
        f"/sys/bus/pci/devices/{addr}/vendor": vendor + "\n",
        f"/sys/bus/pci/devices/{addr}/class": klass + "\n",
    }


def healthy_node() -> FixtureProbe:
    files: dict[str, str] = {
        "/proc/meminfo": fixture_text("host/meminfo-24g.txt"),
        "/proc/driver/nvidia/version": fixture_text("host/proc-driver-nvidia-version-550.txt"),
        "/sys/class/net/eth0/operstate": "up\n",
        "/sys/class/net/lo/operstate": "unknown\n",
        **_pci("0000:00:00.0", "0x8086", "0x060000"),  # host bridge
        **_pci("0000:18:00.0", "0x10de", "0x030200"),
        **_pci("0000:2a:00.0", "0x10de", "0x030200"),
    }
    for f in (FIXTURES / "host/cgroup-v1").iterdir():
        group = "memory" if f.name.startswith("memory") else "cpu"
        files[f"/sys/fs/cgroup/{group}/{f.name}"] = f.read_text()
    return FixtureProbe(
        files=files,
        commands={"dmesg": CommandOutput(0, fixture_text("host/dmesg-clean.txt"))},
        env={},
        cpus=32,
        disks={"/": DiskUsage(500 * GIB, 400 * GIB), "/dev/shm": DiskUsage(64 * GIB, 64 * GIB)},
        gpu_info=parse_nvidia_smi_q(h100_text()),
        torch_info=TorchInfo(
            installed=True,
            version="2.4.1+cu124",
            cuda_runtime="12.4",
            cuda_available=True,
            device_count=2,
            nccl_version="2.20.5",
        ),
    )


def cpu_box() -> FixtureProbe:
    """A GPU-less machine: the healthy node without driver, PCI GPUs or CUDA torch."""
    node = healthy_node()
    files = {
        k: v
        for k, v in node.files.items()
        if "nvidia" not in k and "0000:18" not in k and "0000:2a" not in k
    }
    return dataclasses.replace(
        node,
        files=files,
        gpu_info=FixtureProbe().gpu_info,
        torch_info=TorchInfo(installed=True, version="2.13.0+cpu", cuda_runtime=None),
    )


Change = Callable[[FixtureProbe], FixtureProbe]


def with_(**fields: Any) -> Change:
    return lambda p: dataclasses.replace(p, **fields)


def with_env(**env: str) -> Change:
    return lambda p: dataclasses.replace(p, env={**p.env, **env})


def with_files(files: dict[str, str | None]) -> Change:
    """Set (or with None, delete) file texts by absolute path."""

    def change(p: FixtureProbe) -> FixtureProbe:
        new = dict(p.files)
        for path, text in files.items():
            if text is None:
                new.pop(path, None)
            else:
                new[path] = text
        return dataclasses.replace(p, files=new)

    return change


def with_gpu_text(*replacements: tuple[str, str], count: int = 1) -> Change:
    return with_(gpu_info=parse_nvidia_smi_q(h100_text(*replacements, count=count)))


def with_torch(**fields: Any) -> Change:
    return lambda p: dataclasses.replace(p, torch_info=dataclasses.replace(p.torch_info, **fields))
