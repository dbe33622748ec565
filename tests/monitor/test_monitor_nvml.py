"""The NVML choke point: NotSupported → absent and logged once, GpuIsLost → marked, no library →
DeviceError with a fix; /proc parsing for process attribution."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pynvml
import pytest

from gpuwise.errors import DeviceError
from gpuwise.monitor.fake import FakeHandle, FakeNvml, scenario
from gpuwise.monitor.nvml import (
    GpuLostError,
    NvmlGpuReader,
    NvmlSession,
    ProcInfo,
    parse_cgroup,
    read_proc_info,
    workload_of,
)


class _NoLibrary(FakeNvml):
    """A machine without the NVIDIA driver: nvmlInit raises what pynvml raises there."""

    def __init__(self, error: type[pynvml.NVMLError]) -> None:
        super().__init__(scenario("idle"))
        self.error = error

    def nvmlInit(self) -> None:
        raise self.error()


@pytest.mark.parametrize(
    ("error", "fix"),
    [
        (pynvml.NVMLError_LibraryNotFound, "install the NVIDIA driver"),  # no libnvidia-ml.so.1
        (pynvml.NVMLError_DriverNotLoaded, "modprobe nvidia"),  # kernel module not loaded
        (pynvml.NVMLError_NoPermission, "/dev/nvidia"),  # not allowed to open the device
        (pynvml.NVMLError_Unknown, "nvidia-smi"),  # anything else
    ],
)
def test_init_failures_become_device_errors_with_a_fix(
    error: type[pynvml.NVMLError], fix: str
) -> None:
    with pytest.raises(DeviceError) as exc:
        NvmlGpuReader(_NoLibrary(error))
    assert fix in exc.value.hint


def test_real_pynvml_without_a_driver_says_how_to_fix() -> None:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:  # pragma: no cover - only on GPU machines
        pynvml.nvmlShutdown()
        pytest.skip("this machine has a working NVML; the no-driver path cannot be shown here")
    with pytest.raises(DeviceError, match="cannot start NVML") as exc:
        NvmlGpuReader()
    assert "--fake" in exc.value.hint


def test_not_supported_is_absent_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeNvml(scenario("mig"))
    session = NvmlSession(fake)
    session.init()
    caplog.set_level(logging.INFO, logger="gpuwise.base.nvml")
    results = [
        session.call("utilization", "nvmlDeviceGetUtilizationRates", FakeHandle(0), gpu=0)
        for _ in range(3)
    ]
    assert results == [None, None, None]
    assert session.unsupported == {"utilization"}
    assert sum("utilization not supported" in r.getMessage() for r in caplog.records) == 1
    assert session.error_counts == {}  # unsupported is not an error


def test_missing_function_is_absent_too() -> None:
    session = NvmlSession(FakeNvml(scenario("idle")))
    session.init()
    assert session.call("nvlink", "nvmlDeviceGetNvLinkState", FakeHandle(0), 0, gpu=0) is None
    assert "nvlink" in session.unsupported


def test_gpu_lost_raises_and_other_errors_are_counted() -> None:
    fake = FakeNvml(scenario("xid"))
    session = NvmlSession(fake)
    session.init()
    for _ in range(5):
        fake.advance()
    with pytest.raises(GpuLostError):
        session.call("memory", "nvmlDeviceGetMemoryInfo", FakeHandle(1), gpu=1)
    assert (
        session.call("memory", "nvmlDeviceGetMemoryInfo", FakeHandle(9), gpu=9) is None
    )  # InvalidArgument
    assert session.error_counts == {"memory": 1}


def test_reader_keeps_reading_the_other_gpus_after_one_is_lost() -> None:
    from gpuwise.monitor.fake import FakeGpuReader

    reader = FakeGpuReader.from_scenario("xid")
    snaps = [reader.read() for _ in range(8)]
    assert [s.gpus[1].lost for s in snaps] == [False] * 4 + [True] * 4
    assert all(not s.gpus[0].lost and s.gpus[0].memory_used_bytes for s in snaps)


@pytest.mark.parametrize(
    ("cgroup", "container", "pod"),
    [
        # cgroup v2 under Kubernetes (systemd driver, containerd)
        (
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1a2b3c4d_5e6f_7a8b_9c0d_1e2f3a4b5c6d.slice/"
            "cri-containerd-" + "ab" * 32 + ".scope",
            "ab" * 6,
            "1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d",
        ),
        # cgroup v1 docker
        ("12:memory:/docker/" + "0123456789abcdef" * 4, "0123456789ab", None),
        # a plain login session
        ("0::/user.slice/user-1000.slice/session-3.scope", None, None),
    ],
)
def test_parse_cgroup(cgroup: str, container: str | None, pod: str | None) -> None:
    assert parse_cgroup(cgroup) == (container, pod)


def test_read_proc_info_of_this_process_and_a_missing_one(tmp_path: Path) -> None:
    me = read_proc_info(os.getpid())
    assert (me.command and "python" in me.command.lower()) or "pytest" in (me.command or "")
    assert me.user
    assert read_proc_info(1, proc_root=tmp_path) == ProcInfo(None, None, None, None)


@pytest.mark.parametrize(
    ("info", "workload"),
    [
        (ProcInfo("alice", "/usr/bin/python3 train.py", "abcdef012345", "uid-1"), "pod:uid-1"),
        (
            ProcInfo("alice", "/usr/bin/python3 train.py", "abcdef012345", None),
            "container:abcdef012345",
        ),
        (ProcInfo("alice", "/usr/bin/python3 train.py", None, None), "alice/python3"),
        (ProcInfo(None, None, None, None), "unknown/unknown"),
    ],
)
def test_workload_of(info: ProcInfo, workload: str) -> None:
    assert workload_of(info) == workload


def test_our_nvml_constants_are_pynvml_constants() -> None:
    from gpuwise.monitor import nvml
    from gpuwise.monitor.snapshot import THROTTLE_REASONS

    assert (nvml._TEMPERATURE_GPU, nvml._CLOCK_SM, nvml._CLOCK_MEM) == (
        pynvml.NVML_TEMPERATURE_GPU,
        pynvml.NVML_CLOCK_SM,
        pynvml.NVML_CLOCK_MEM,
    )
    assert (nvml._PCIE_TX, nvml._PCIE_RX) == (
        pynvml.NVML_PCIE_UTIL_TX_BYTES,
        pynvml.NVML_PCIE_UTIL_RX_BYTES,
    )
    assert (nvml._ECC_CORRECTED, nvml._ECC_UNCORRECTED, nvml._VOLATILE_ECC) == (
        pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED,
        pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
        pynvml.NVML_VOLATILE_ECC,
    )
    assert pynvml.nvmlEventTypeXidCriticalError == nvml._EVENT_XID
    assert (nvml._GPM_SM_UTIL, nvml._GPM_ANY_TENSOR_UTIL) == (
        pynvml.NVML_GPM_METRIC_SM_UTIL,
        pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
    )
    assert THROTTLE_REASONS["hw_thermal"] == pynvml.nvmlClocksEventReasonHwThermalSlowdown
    assert THROTTLE_REASONS["sw_thermal"] == pynvml.nvmlClocksEventReasonSwThermalSlowdown
    assert THROTTLE_REASONS["gpu_idle"] == pynvml.nvmlClocksEventReasonGpuIdle
    assert THROTTLE_REASONS["sw_power_cap"] == pynvml.nvmlClocksEventReasonSwPowerCap
    assert THROTTLE_REASONS["hw_power_brake"] == pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown


def test_empty_mig_slots_are_not_errors() -> None:
    from gpuwise.monitor.fake import FakeGpuReader

    reader = FakeGpuReader.from_scenario("mig")
    snap = reader.read()
    assert len(snap.gpus[0].mig_devices) == 3  # of 7 slots
    assert reader.session.error_counts == {}
