"""Doctor's view of the GPUs, read through gpuwise's one NVML layer.

Every NVML call goes through :class:`gpuwise.base.nvml.NvmlSession` (the choke point the
exporter, ``monitor`` and ``bench`` use too): "not supported" becomes None, a lost GPU is named,
and a missing library or driver becomes :attr:`GpuInfo.nvml_error`. ``lib`` is the NVML module
(default ``pynvml``); :class:`gpuwise.base.nvml_fake.FakeNvml` stands in for it in tests, so the
doctor's GPU checks run on a fake GPU. Throttle reasons use the one table,
:data:`gpuwise.base.nvml.THROTTLE_REASONS`; utilization is a 0–1 ratio.
"""

from __future__ import annotations

from typing import Any

from gpuwise.base.nvml import GpuLostError, NvmlSession, nvml_text, throttle_reason_names
from gpuwise.doctor.facts import GpuDevice, GpuInfo
from gpuwise.errors import DeviceError

# nvml.h values (as exposed by nvidia-ml-py), repeated so a fake library need not define them.
_ENABLED = 1  # NVML_FEATURE_ENABLED
_CORRECTED, _UNCORRECTED = 0, 1  # NVML_MEMORY_ERROR_TYPE_*
_VOLATILE, _AGGREGATE = 0, 1  # NVML_VOLATILE_ECC, NVML_AGGREGATE_ECC
_RETIRED_SBE, _RETIRED_DBE = (
    0,
    1,
)  # NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS, _DOUBLE_BIT_ECC_ERROR


def decode_clock_event_reasons(mask: int) -> tuple[str, ...]:
    """NVML's clock event reason bitmask → reason names (the monitor's table)."""
    return throttle_reason_names(mask)


def _text(value: object) -> str | None:
    if value is None:
        return None
    return nvml_text(value)


def _device(s: NvmlSession, index: int) -> GpuDevice:
    c = s.call
    h = c("handle", "nvmlDeviceGetHandleByIndex", index, gpu=index)
    if h is None:
        return GpuDevice(index=index, name="unreadable (NVML gave no handle)")
    mig = c("mig", "nvmlDeviceGetMigMode", h, gpu=index)
    ecc = c("ecc", "nvmlDeviceGetEccMode", h, gpu=index)
    mig_count: int | None = None
    if mig is not None and mig[0] == _ENABLED:
        total = c("mig", "nvmlDeviceGetMaxMigDeviceCount", h, gpu=index) or 0
        mig_count = sum(
            1
            for i in range(int(total))
            if c("mig", "nvmlDeviceGetMigDeviceHandleByIndex", h, i, gpu=index, not_found_ok=True)
            is not None
        )

    def ecc_count(kind: int, counter: int) -> int | None:
        value = c("ecc", "nvmlDeviceGetTotalEccErrors", h, kind, counter, gpu=index)
        return int(value) if value is not None else None

    sbe = c("retired_pages", "nvmlDeviceGetRetiredPages", h, _RETIRED_SBE, gpu=index)
    dbe = c("retired_pages", "nvmlDeviceGetRetiredPages", h, _RETIRED_DBE, gpu=index)
    pending = c("retired_pages", "nvmlDeviceGetRetiredPagesPendingStatus", h, gpu=index)
    remap = c(
        "remapped_rows", "nvmlDeviceGetRemappedRows", h, gpu=index
    )  # (correctable, uncorrectable, pending, failed)
    throttle_fn = (
        "nvmlDeviceGetCurrentClocksEventReasons"
        if hasattr(s.lib, "nvmlDeviceGetCurrentClocksEventReasons")
        else "nvmlDeviceGetCurrentClocksThrottleReasons"
    )
    reasons = c("throttle", throttle_fn, h, gpu=index)
    util = c("utilization", "nvmlDeviceGetUtilizationRates", h, gpu=index)
    pci = c("pci", "nvmlDeviceGetPciInfo", h, gpu=index)
    persistence = c("persistence", "nvmlDeviceGetPersistenceMode", h, gpu=index)
    return GpuDevice(
        index=index,
        name=_text(c("name", "nvmlDeviceGetName", h, gpu=index)) or "unknown",
        uuid=_text(c("uuid", "nvmlDeviceGetUUID", h, gpu=index)),
        pci_bus_id=_text(getattr(pci, "busId", None)),
        persistence_mode=None if persistence is None else persistence == _ENABLED,
        mig_current=None if mig is None else mig[0] == _ENABLED,
        mig_pending=None if mig is None else mig[1] == _ENABLED,
        mig_device_count=mig_count,
        ecc_enabled=None if ecc is None else ecc[0] == _ENABLED,
        ecc_volatile_uncorrected=ecc_count(_UNCORRECTED, _VOLATILE),
        ecc_volatile_corrected=ecc_count(_CORRECTED, _VOLATILE),
        ecc_aggregate_uncorrected=ecc_count(_UNCORRECTED, _AGGREGATE),
        retired_pages_sbe=None if sbe is None else len(sbe),
        retired_pages_dbe=None if dbe is None else len(dbe),
        retired_pages_pending=None if pending is None else pending == _ENABLED,
        remapped_rows_uncorrectable=None if remap is None else int(remap[1]),
        remapped_rows_pending=None if remap is None else bool(remap[2]),
        remapping_failed=None if remap is None else bool(remap[3]),
        pcie_gen_current=c("pcie", "nvmlDeviceGetCurrPcieLinkGeneration", h, gpu=index),
        pcie_gen_max=c("pcie", "nvmlDeviceGetMaxPcieLinkGeneration", h, gpu=index),
        pcie_width_current=c("pcie", "nvmlDeviceGetCurrPcieLinkWidth", h, gpu=index),
        pcie_width_max=c("pcie", "nvmlDeviceGetMaxPcieLinkWidth", h, gpu=index),
        performance_state=c("pstate", "nvmlDeviceGetPerformanceState", h, gpu=index),
        utilization_gpu_ratio=None if util is None else float(util.gpu) / 100,
        clock_event_reasons=() if reasons is None else decode_clock_event_reasons(int(reasons)),
    )


def read_nvml(lib: Any = None) -> GpuInfo:
    """The driver's view of every GPU; ``nvml_error`` says why not when NVML is unusable.

    ``lib``: the NVML module (default ``pynvml``), e.g. a :class:`~gpuwise.base.nvml_fake.FakeNvml`.
    """
    if lib is None:
        try:
            import pynvml
        except ImportError as exc:
            return GpuInfo(nvml_error=f"nvidia-ml-py is not installed ({exc})")
        lib = pynvml
    session = NvmlSession(lib)
    try:
        session.init()
    except (
        DeviceError
    ) as exc:  # the NVML text ("Driver/library version mismatch") is what checks read
        return GpuInfo(nvml_error=str(exc.__cause__ or exc))
    try:
        driver = _text(session.call("driver_version", "nvmlSystemGetDriverVersion"))
        cuda_int = session.call("cuda_version", "nvmlSystemGetCudaDriverVersion")
        cuda = f"{cuda_int // 1000}.{cuda_int % 1000 // 10}" if cuda_int else None
        count = session.call("device_count", "nvmlDeviceGetCount") or 0
        devices = []
        for i in range(int(count)):
            try:
                devices.append(_device(session, i))
            except GpuLostError as exc:  # fell off the bus: say so by name
                devices.append(GpuDevice(index=i, name=f"unreadable ({exc or 'GPU is lost'})"))
        return GpuInfo(driver_version=driver, cuda_driver_version=cuda, devices=tuple(devices))
    finally:
        session.shutdown()


def driver_version(lib: Any = None) -> str | None:
    """The NVIDIA driver version, or None without a working NVML (what ``bench`` records)."""
    return read_nvml(lib).driver_version
