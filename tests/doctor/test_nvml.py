"""The real NVML reader: without a driver it says why; with a GPU it reads every device."""

from __future__ import annotations

import pytest

from gpuwise.doctor import SystemProbe
from gpuwise.doctor.nvml import read_nvml

INFO = read_nvml()


@pytest.mark.skipif(INFO.available, reason="an NVIDIA driver is present")
def test_without_a_driver_nvml_error_says_why() -> None:
    assert INFO.nvml_error and INFO.devices == ()
    assert "Not Found" in INFO.nvml_error or "not installed" in INFO.nvml_error


@pytest.mark.gpu
@pytest.mark.skipif(not INFO.available, reason="needs an NVIDIA GPU and driver")
def test_reads_every_gpu() -> None:
    assert INFO.driver_version and INFO.cuda_driver_version and INFO.devices
    for d in INFO.devices:
        assert d.uuid and d.uuid.startswith("GPU-")
        assert d.pcie_width_max is None or d.pcie_width_max >= (d.pcie_width_current or 0)


def test_system_probe_reads_this_machine() -> None:
    probe = SystemProbe()
    assert probe.cpu_count() >= 1
    assert probe.read_text("/proc/meminfo") is not None
    assert probe.read_text("/nonexistent") is None and probe.list_dir("/nonexistent") is None
    assert probe.run(["definitely-not-a-command-gpuwise"]) is None
    out = probe.run(["true"])
    assert out is not None and out.returncode == 0
    assert probe.disk_usage("/") is not None and probe.disk_usage("/nonexistent/x") is None
