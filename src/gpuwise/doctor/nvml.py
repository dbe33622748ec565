"""Read the GPUs through NVML (nvidia-ml-py) into :class:`~gpuwise.doctor.probe.GpuInfo`.

Every call goes through :func:`_query`, which turns "not supported on this GPU" and similar
NVML errors into None, so one missing figure never hides the others. Without a driver,
``nvmlInit`` fails and the returned GpuInfo carries the reason in ``nvml_error``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from gpuwise.doctor.probe import GpuDevice, GpuInfo

log = logging.getLogger(__name__)
T = TypeVar("T")

# nvml.h clock event reason bits (same values as nvidia-ml-py's nvmlClocksEventReason* constants).
_REASON_BITS = {
    0x1: "idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


def decode_clock_event_reasons(mask: int) -> tuple[str, ...]:
    """NVML's clock event reason bitmask → reason names."""
    return tuple(name for bit, name in _REASON_BITS.items() if mask & bit)


def _query(fn: Callable[..., T], *args: Any) -> T | None:
    import pynvml

    try:
        return fn(*args)
    except pynvml.NVMLError as exc:
        log.debug("NVML %s: %s", getattr(fn, "__name__", fn), exc)
        return None
    except (AttributeError, TypeError):  # an older nvidia-ml-py without this function
        return None


def _text(value: object) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def _device(nv: Any, index: int) -> GpuDevice:
    h = nv.nvmlDeviceGetHandleByIndex(index)
    enabled = nv.NVML_FEATURE_ENABLED
    mig = _query(nv.nvmlDeviceGetMigMode, h)
    ecc = _query(nv.nvmlDeviceGetEccMode, h)
    mig_count: int | None = None
    if mig is not None and mig[0] == enabled:
        total = _query(nv.nvmlDeviceGetMaxMigDeviceCount, h) or 0
        mig_count = sum(1 for i in range(total) if _query(nv.nvmlDeviceGetMigDeviceHandleByIndex, h, i) is not None)

    def ecc_count(kind: int, counter: int) -> int | None:
        value = _query(nv.nvmlDeviceGetTotalEccErrors, h, kind, counter)
        return int(value) if value is not None else None

    sbe = _query(nv.nvmlDeviceGetRetiredPages, h, nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
    dbe = _query(nv.nvmlDeviceGetRetiredPages, h, nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
    pending = _query(nv.nvmlDeviceGetRetiredPagesPendingStatus, h)
    remap = _query(nv.nvmlDeviceGetRemappedRows, h)  # (correctable, uncorrectable, pending, failed)
    reasons_fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or nv.nvmlDeviceGetCurrentClocksThrottleReasons
    reasons = _query(reasons_fn, h)
    util = _query(nv.nvmlDeviceGetUtilizationRates, h)
    pci = _query(nv.nvmlDeviceGetPciInfo, h)
    persistence = _query(nv.nvmlDeviceGetPersistenceMode, h)
    return GpuDevice(
        index=index,
        name=_text(_query(nv.nvmlDeviceGetName, h)) or "unknown",
        uuid=_text(_query(nv.nvmlDeviceGetUUID, h)),
        pci_bus_id=_text(getattr(pci, "busId", None)),
        persistence_mode=None if persistence is None else persistence == enabled,
        mig_current=None if mig is None else mig[0] == enabled,
        mig_pending=None if mig is None else mig[1] == enabled,
        mig_device_count=mig_count,
        ecc_enabled=None if ecc is None else ecc[0] == enabled,
        ecc_volatile_uncorrected=ecc_count(nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC),
        ecc_volatile_corrected=ecc_count(nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_VOLATILE_ECC),
        ecc_aggregate_uncorrected=ecc_count(nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_AGGREGATE_ECC),
        retired_pages_sbe=None if sbe is None else len(sbe),
        retired_pages_dbe=None if dbe is None else len(dbe),
        retired_pages_pending=None if pending is None else pending == enabled,
        remapped_rows_uncorrectable=None if remap is None else int(remap[1]),
        remapped_rows_pending=None if remap is None else bool(remap[2]),
        remapping_failed=None if remap is None else bool(remap[3]),
        pcie_gen_current=_query(nv.nvmlDeviceGetCurrPcieLinkGeneration, h),
        pcie_gen_max=_query(nv.nvmlDeviceGetMaxPcieLinkGeneration, h),
        pcie_width_current=_query(nv.nvmlDeviceGetCurrPcieLinkWidth, h),
        pcie_width_max=_query(nv.nvmlDeviceGetMaxPcieLinkWidth, h),
        performance_state=_query(nv.nvmlDeviceGetPerformanceState, h),
        utilization_gpu_pct=None if util is None else float(util.gpu),
        clock_event_reasons=() if reasons is None else decode_clock_event_reasons(int(reasons)),
    )


def read_nvml() -> GpuInfo:
    """The driver's view of every GPU; ``nvml_error`` says why not when NVML is unusable."""
    try:
        import pynvml as nv
    except ImportError as exc:
        return GpuInfo(nvml_error=f"nvidia-ml-py is not installed ({exc})")
    try:
        nv.nvmlInit()
    except nv.NVMLError as exc:
        return GpuInfo(nvml_error=str(exc))
    try:
        driver = _text(_query(nv.nvmlSystemGetDriverVersion))
        cuda_int = _query(nv.nvmlSystemGetCudaDriverVersion)
        cuda = f"{cuda_int // 1000}.{cuda_int % 1000 // 10}" if cuda_int else None
        count = _query(nv.nvmlDeviceGetCount) or 0
        devices = []
        for i in range(count):
            try:
                devices.append(_device(nv, i))
            except nv.NVMLError as exc:  # e.g. GPU is lost: say so by name
                devices.append(GpuDevice(index=i, name=f"unreadable ({exc})"))
        return GpuInfo(driver_version=driver, cuda_driver_version=cuda, devices=tuple(devices))
    finally:
        _query(nv.nvmlShutdown)
