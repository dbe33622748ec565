"""Doctor reads GPUs through gpuwise's one NVML layer (NvmlSession); its GPU checks run on the fake
NVML here, and on a real driver where there is one."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from gpuwise.doctor import DoctorOptions, SystemProbe, run_doctor
from gpuwise.doctor.nvml import driver_version, read_nvml
from gpuwise.monitor.fake import FakeNvml, parse_trace
from tests.doctor.machines import healthy_node

INFO = read_nvml()
H100 = {"name": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559}


def _fake(
    gpu: dict[str, Any] | None = None, frame: dict[str, Any] | None = None, **kw: Any
) -> FakeNvml:
    doc = {
        "gpus": [{**H100, **(gpu or {})}, H100],
        "frames": [{"gpus": [{"util": 90, **(frame or {})}, {"util": 90}]}],
    }
    return FakeNvml(parse_trace(doc, "fake"), **kw)


def _check(check: str, lib: FakeNvml) -> Any:
    probe = dataclasses.replace(healthy_node(), gpu_info=read_nvml(lib))
    (r,) = run_doctor(probe, DoctorOptions(num_workers=4), only=(check,))
    return r


def test_fake_gpu_reads_like_a_driver() -> None:
    info = read_nvml(_fake())
    assert (
        info.available and info.driver_version == "550.54.15" and info.cuda_driver_version == "12.4"
    )
    d = info.devices[0]
    assert (
        d.uuid and d.uuid.startswith("GPU-") and d.utilization_gpu_ratio == pytest.approx(0.9)
    )  # a ratio
    assert (d.pcie_gen_current, d.pcie_width_max, d.persistence_mode, d.ecc_enabled) == (
        5,
        16,
        True,
        True,
    )
    assert driver_version(_fake()) == "550.54.15"  # what bench records


@pytest.mark.parametrize(
    ("check", "gpu", "frame", "status", "text"),
    [
        ("gpu-throttle", {}, {}, "ok", "no thermal or hardware clock throttling"),
        ("gpu-throttle", {}, {"throttle": 0x40}, "fail", "hardware thermal slowdown"),
        ("gpu-throttle", {}, {"throttle": 0x20}, "warn", "software thermal slowdown"),
        ("gpu-throttle", {}, {"throttle": 0x4}, "ok", "at the power limit"),
        ("gpu-pcie", {"pcie_width": 4}, {}, "fail", "PCIe link x4 of x16"),
        ("gpu-pcie", {"pcie_gen": 3}, {}, "warn", "PCIe gen 3 of 5 while busy"),
        ("gpu-persistence", {"persistence_mode": False}, {}, "warn", "persistence mode is off"),
        ("gpu-ecc", {}, {"ecc_uncorrected": 2}, "fail", "2 uncorrectable ECC error"),
        ("gpu-ecc", {}, {"remap_failed": True}, "fail", "row remapping failed"),
        ("gpu-ecc", {"retired_pages_pending": True}, {}, "fail", "page retirement is pending"),
    ],
)
def test_gpu_checks_on_the_fake(
    check: str, gpu: dict[str, Any], frame: dict[str, Any], status: str, text: str
) -> None:
    r = _check(check, _fake(gpu, frame))
    assert (r.status, text in r.finding) == (status, True), r


def test_a_lost_gpu_is_named() -> None:
    info = read_nvml(_fake(frame={"lost": True}))
    assert info.devices[0].name.startswith("unreadable") and "lost" in info.devices[0].name
    assert info.devices[1].name == "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize(
    ("error", "words"),
    [
        ("LibraryNotFound", "Not Found"),
        ("DriverNotLoaded", "Driver Not Loaded"),
        ("LibRmVersionMismatch", "mismatch"),
    ],
)
def test_init_failures_say_why(error: str, words: str) -> None:
    info = read_nvml(_fake(init_error=error))
    assert (
        not info.available
        and info.devices == ()
        and words.lower() in (info.nvml_error or "").lower()
    )


def test_driver_mismatch_fails_the_driver_check() -> None:
    r = _check("nvidia-driver", _fake(init_error="LibRmVersionMismatch"))
    assert r.status == "fail" and "mismatch" in r.finding


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


def test_gpu_proof_detection_reads_through_the_same_layer() -> None:
    from gpuwise.bench.proof.detect import NvmlFacts
    from gpuwise.bench.proof.detect import read_nvml as proof_read_nvml

    facts = proof_read_nvml(_fake())
    assert (
        isinstance(facts, NvmlFacts) and facts.driver == "550.54.15" and facts.cuda_driver == "12.4"
    )
    assert facts.gpu_name == "NVIDIA H100 80GB HBM3" and facts.gpus[0]["pcie_width"] == 16
    assert facts.gpus[0]["power_limit_w"] is None  # not in the fake: None, the rest still read
    reason = proof_read_nvml(_fake(init_error="DriverNotLoaded"))
    assert isinstance(reason, str) and "no NVIDIA driver" in reason
