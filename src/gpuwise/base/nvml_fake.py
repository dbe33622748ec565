"""The fake NVML library: the subset of ``pynvml`` gpuwise calls, answering from a trace.

It raises the real ``pynvml.NVMLError_*`` classes where a real GPU would (a MIG GPU raises
``NVMLError_NotSupported`` for utilization; a GPU that fell off the bus raises
``NVMLError_GpuIsLost``), so the reader's choke point and error mapping run unchanged.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pynvml

from gpuwise.base.nvml_trace import _GROUP_FUNCTIONS, _MIB, _NVLINK_ERROR_KINDS, Trace


@dataclass(frozen=True)
class FakeHandle:
    """A device handle of the fake library: GPU ``index``, and ``mig`` index for MIG devices."""

    index: int
    mig: int | None = None


class FakeNvml:
    """The subset of ``pynvml`` gpuwise uses, answering from a :class:`Trace`.

    ``frame`` picks the frame being served; :meth:`advance` moves to the next (looping).
    """

    NVMLError = pynvml.NVMLError
    NVMLError_NotSupported = pynvml.NVMLError_NotSupported
    NVMLError_FunctionNotFound = pynvml.NVMLError_FunctionNotFound
    NVMLError_NoPermission = pynvml.NVMLError_NoPermission
    NVMLError_GpuIsLost = pynvml.NVMLError_GpuIsLost
    NVMLError_Timeout = pynvml.NVMLError_Timeout
    NVMLError_Uninitialized = pynvml.NVMLError_Uninitialized
    NVMLError_InvalidArgument = pynvml.NVMLError_InvalidArgument
    NVMLError_NotFound = pynvml.NVMLError_NotFound
    NVML_GPM_METRICS_GET_VERSION = 1

    def __init__(self, trace: Trace, *, init_error: str | None = None) -> None:
        """``init_error``: the NVML error ``nvmlInit`` raises, e.g. ``LibraryNotFound``, ``DriverNotLoaded``,
        ``LibRmVersionMismatch`` (a machine whose driver is broken)."""
        self.trace = trace
        self._init_error = init_error
        self._ends = list(
            itertools.accumulate(repeat for repeat, _ in trace.frames)
        )  # no expansion: repeat may be huge
        self.frame = 0
        self._initialised = False
        self._pending_xid: list[tuple[int, int]] = []
        self._xid_seen_frame = -1
        self._unsupported = [
            {fn for group in g.get("unsupported", ()) for fn in _GROUP_FUNCTIONS[group]}
            for g in trace.gpus
        ]

    # -- frame control -------------------------------------------------------------------
    @property
    def frame_count(self) -> int:
        return self._ends[-1]

    def values(self, frame: int | None = None) -> tuple[Mapping[str, Any], ...]:
        """Per-GPU values of an expanded frame (default: the one being served)."""
        k = self.frame if frame is None else frame
        return self.trace.frames[bisect.bisect_right(self._ends, k)][1]

    def advance(self, n: int = 1) -> None:
        self.frame = (self.frame + n) % self.frame_count

    def _queue_xids(self) -> None:
        if self._xid_seen_frame != self.frame:
            self._xid_seen_frame = self.frame
            for i, g in enumerate(self.values()):
                self._pending_xid.extend((i, int(code)) for code in g.get("xid", ()))

    def _gpu(self, handle: FakeHandle, fn: str) -> Mapping[str, Any]:
        if not self._initialised:
            raise pynvml.NVMLError_Uninitialized()
        if not isinstance(handle, FakeHandle) or not 0 <= handle.index < len(self.trace.gpus):
            raise pynvml.NVMLError_InvalidArgument()
        values = self.values()[handle.index]
        if values.get("lost"):
            raise pynvml.NVMLError_GpuIsLost()
        if fn in self._unsupported[handle.index]:
            raise pynvml.NVMLError_NotSupported()
        if (
            handle.mig is None
            and self.trace.gpus[handle.index].get("mig")
            and fn
            in (
                "nvmlDeviceGetUtilizationRates",
                "nvmlGpmSampleGet",
                "nvmlDeviceGetProcessUtilization",
                "nvmlDeviceGetEncoderUtilization",
                "nvmlDeviceGetDecoderUtilization",
            )
        ):
            raise pynvml.NVMLError_NotSupported()  # MIG mode: no whole-GPU utilization (DCGM #80)
        return values

    # -- the pynvml surface --------------------------------------------------------------
    def nvmlInit(self) -> None:
        if self._init_error:
            raise getattr(pynvml, f"NVMLError_{self._init_error}")()
        self._initialised = True

    def nvmlShutdown(self) -> None:
        self._initialised = False

    def nvmlSystemGetDriverVersion(self) -> str:
        return str(self.trace.gpus[0].get("driver_version", "550.54.15"))

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return int(self.trace.gpus[0].get("cuda_driver_version", 12040))

    def nvmlDeviceGetCount(self) -> int:
        return len(self.trace.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        if not 0 <= index < len(self.trace.gpus):
            raise pynvml.NVMLError_InvalidArgument()
        return FakeHandle(index)

    def nvmlDeviceGetUUID(self, h: FakeHandle) -> str:
        g = self.trace.gpus[h.index]
        if h.mig is not None:
            return str(g["mig"][h.mig].get("uuid", f"MIG-{h.index:02d}{h.mig:02d}-fake"))
        return str(g.get("uuid", f"GPU-{h.index:08d}-fake-{self.trace.name}"))

    def nvmlDeviceGetName(self, h: FakeHandle) -> str:
        return str(self.trace.gpus[h.index].get("name", "NVIDIA H100 80GB HBM3"))

    def nvmlDeviceGetUtilizationRates(self, h: FakeHandle) -> Any:
        v = self._gpu(h, "nvmlDeviceGetUtilizationRates")
        return SimpleNamespace(gpu=int(v.get("util", 0)), memory=int(v.get("mem_util", 0)))

    def nvmlDeviceGetMemoryInfo(self, h: FakeHandle, version: Any = None) -> Any:
        v = self._gpu(h, "nvmlDeviceGetMemoryInfo")
        g = self.trace.gpus[h.index]
        if h.mig is not None:
            total = int(g["mig"][h.mig].get("memory_total_mib", 9856)) * _MIB
            used_list = v.get("mig_used_mib", [])
            used = int(used_list[h.mig] if h.mig < len(used_list) else 0) * _MIB
        else:
            total = int(g.get("memory_total_mib", 81559)) * _MIB
            used = int(v.get("memory_used_mib", 0)) * _MIB
        return SimpleNamespace(
            total=total, used=min(used, total), free=max(total - used, 0), reserved=0
        )

    def nvmlDeviceGetPowerUsage(self, h: FakeHandle) -> int:
        return int(self._gpu(h, "nvmlDeviceGetPowerUsage").get("power_w", 70) * 1000)

    def nvmlDeviceGetEnforcedPowerLimit(self, h: FakeHandle) -> int:
        self._gpu(h, "nvmlDeviceGetEnforcedPowerLimit")
        return int(self.trace.gpus[h.index].get("power_limit_w", 700) * 1000)

    def nvmlDeviceGetTemperature(self, h: FakeHandle, sensor: int) -> int:
        return int(self._gpu(h, "nvmlDeviceGetTemperature").get("temperature_c", 35))

    def nvmlDeviceGetClockInfo(self, h: FakeHandle, clock: int) -> int:
        v = self._gpu(h, "nvmlDeviceGetClockInfo")
        return int(v.get("sm_clock_mhz", 1980) if clock == 1 else v.get("memory_clock_mhz", 2619))

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: FakeHandle) -> int:
        return int(self._gpu(h, "nvmlDeviceGetCurrentClocksEventReasons").get("throttle", 0))

    def nvmlDeviceGetPcieThroughput(self, h: FakeHandle, counter: int) -> int:
        v = self._gpu(h, "nvmlDeviceGetPcieThroughput")
        return int(v.get("pcie_tx_kb_s" if counter == 0 else "pcie_rx_kb_s", 0))

    def nvmlDeviceGetTotalEccErrors(self, h: FakeHandle, error_type: int, counter_type: int) -> int:
        v = self._gpu(h, "nvmlDeviceGetTotalEccErrors")
        return int(v.get("ecc_corrected" if error_type == 0 else "ecc_uncorrected", 0))

    def nvmlDeviceGetComputeRunningProcesses(self, h: FakeHandle) -> list[Any]:
        v = self._gpu(h, "nvmlDeviceGetComputeRunningProcesses")
        mig = self.trace.gpus[h.index].get("mig", [])

        def instance(p: Mapping[str, Any]) -> int:
            if "mig" not in p:
                return 0xFFFFFFFF
            return int(mig[p["mig"]].get("gpu_instance_id", p["mig"] + 1))

        return [
            SimpleNamespace(
                pid=int(p["pid"]),
                usedGpuMemory=None if mig else int(p.get("memory_mib", 0)) * _MIB,
                gpuInstanceId=instance(p),
                computeInstanceId=0 if "mig" in p else 0xFFFFFFFF,
            )
            for p in v.get("processes", ())
        ]

    def nvmlDeviceGetProcessUtilization(self, h: FakeHandle, last_seen: int) -> list[Any]:
        v = self._gpu(h, "nvmlDeviceGetProcessUtilization")
        samples = [
            SimpleNamespace(
                pid=int(p["pid"]),
                smUtil=int(p["sm_util"]),
                memUtil=0,
                encUtil=0,
                decUtil=0,
                timeStamp=self.frame + 1,
            )
            for p in v.get("processes", ())
            if "sm_util" in p
        ]
        if not samples:
            raise pynvml.NVMLError_NotFound()  # no sample since last_seen, as the driver says
        return samples

    def nvmlDeviceGetTotalEnergyConsumption(self, h: FakeHandle) -> int:
        v = self._gpu(h, "nvmlDeviceGetTotalEnergyConsumption")
        joules = v.get("energy_j", self.frame * self.trace.interval_s * float(v.get("power_w", 70)))
        return int(joules * 1000)  # millijoules

    def nvmlDeviceGetRemappedRows(self, h: FakeHandle) -> tuple[int, int, int, int]:
        v = self._gpu(h, "nvmlDeviceGetRemappedRows")
        return (
            int(v.get("remap_correctable", 0)),
            int(v.get("remap_uncorrectable", 0)),
            int(bool(v.get("remap_pending", False))),
            int(bool(v.get("remap_failed", False))),
        )

    def nvmlDeviceGetPcieReplayCounter(self, h: FakeHandle) -> int:
        return int(self._gpu(h, "nvmlDeviceGetPcieReplayCounter").get("pcie_replay", 0))

    def nvmlDeviceGetEncoderUtilization(self, h: FakeHandle) -> list[int]:
        return [int(self._gpu(h, "nvmlDeviceGetEncoderUtilization").get("enc_util", 0)), 167000]

    def nvmlDeviceGetDecoderUtilization(self, h: FakeHandle) -> list[int]:
        return [int(self._gpu(h, "nvmlDeviceGetDecoderUtilization").get("dec_util", 0)), 167000]

    def nvmlDeviceGetFieldValues(self, h: FakeHandle, field_ids: list[int]) -> list[Any]:
        v = self._gpu(h, "nvmlDeviceGetFieldValues")
        known: dict[int, float] = {}
        if "memory_temperature_c" in v:
            known[82] = float(v["memory_temperature_c"])
        if "nvlink_tx_kib" in v:
            known[138] = float(v["nvlink_tx_kib"])
        if "nvlink_rx_kib" in v:
            known[139] = float(v["nvlink_rx_kib"])
        for kind, n in v.get("nvlink_errors", {}).items():
            known[_NVLINK_ERROR_KINDS[kind]] = float(n)
        # NVML answers every field: nvmlReturn 3 (NOT_SUPPORTED) for the ones it does not have
        return [
            SimpleNamespace(
                fieldId=f,
                nvmlReturn=0 if f in known else 3,
                valueType=3,
                value=SimpleNamespace(ullVal=int(known.get(f, 0))),
            )
            for f in field_ids
        ]

    def nvmlDeviceGetAttributes(self, h: FakeHandle) -> Any:
        self._gpu(h, "nvmlDeviceGetAttributes")
        if h.mig is None:
            return SimpleNamespace(gpuInstanceSliceCount=7, computeInstanceSliceCount=7)
        m = self.trace.gpus[h.index]["mig"][h.mig]
        slices = int(m.get("slices", 1))
        return SimpleNamespace(
            gpuInstanceSliceCount=slices,
            computeInstanceSliceCount=slices,
            memorySizeMB=int(m.get("memory_total_mib", 9856)),
        )

    # what `gpuwise doctor` reads: static facts of the trace's GPU entry
    def _static(self, h: FakeHandle, fn: str, key: str, default: Any) -> Any:
        self._gpu(h, fn)
        value = self.trace.gpus[h.index].get(key, default)
        if value is None:
            raise pynvml.NVMLError_NotSupported()
        return value

    def nvmlDeviceGetPersistenceMode(self, h: FakeHandle) -> int:
        return int(bool(self._static(h, "nvmlDeviceGetPersistenceMode", "persistence_mode", True)))

    def nvmlDeviceGetEccMode(self, h: FakeHandle) -> list[int]:
        on = int(bool(self._static(h, "nvmlDeviceGetEccMode", "ecc_enabled", True)))
        return [on, on]

    def nvmlDeviceGetRetiredPages(self, h: FakeHandle, cause: int) -> list[int]:
        n = int(
            self._static(
                h,
                "nvmlDeviceGetRetiredPages",
                "retired_pages_dbe" if cause == 1 else "retired_pages_sbe",
                0,
            )
        )
        return [0x1000 * k for k in range(n)]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: FakeHandle) -> int:
        return int(
            bool(
                self._static(
                    h, "nvmlDeviceGetRetiredPagesPendingStatus", "retired_pages_pending", False
                )
            )
        )

    def nvmlDeviceGetPciInfo(self, h: FakeHandle) -> Any:
        bus = self._static(
            h, "nvmlDeviceGetPciInfo", "pci_bus_id", f"00000000:{0x18 + h.index:02X}:00.0"
        )
        return SimpleNamespace(busId=str(bus))

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: FakeHandle) -> int:
        return int(self._static(h, "nvmlDeviceGetCurrPcieLinkGeneration", "pcie_gen", 5))

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: FakeHandle) -> int:
        return int(self._static(h, "nvmlDeviceGetMaxPcieLinkGeneration", "pcie_gen_max", 5))

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: FakeHandle) -> int:
        return int(self._static(h, "nvmlDeviceGetCurrPcieLinkWidth", "pcie_width", 16))

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: FakeHandle) -> int:
        return int(self._static(h, "nvmlDeviceGetMaxPcieLinkWidth", "pcie_width_max", 16))

    def nvmlDeviceGetPerformanceState(self, h: FakeHandle) -> int:
        v = self._gpu(h, "nvmlDeviceGetPerformanceState")
        return int(v.get("pstate", 0 if v.get("util", 0) else 8))

    def nvmlDeviceGetMigMode(self, h: FakeHandle) -> list[int]:
        self._gpu(h, "nvmlDeviceGetMigMode")
        on = 1 if self.trace.gpus[h.index].get("mig") else 0
        return [on, on]

    def nvmlDeviceGetMaxMigDeviceCount(self, h: FakeHandle) -> int:
        self._gpu(h, "nvmlDeviceGetMaxMigDeviceCount")
        return (
            7 if self.trace.gpus[h.index].get("mig") else 0
        )  # empty slots raise NotFound, as on a GPU

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: FakeHandle, index: int) -> FakeHandle:
        self._gpu(h, "nvmlDeviceGetMigDeviceHandleByIndex")
        if not 0 <= index < len(self.trace.gpus[h.index].get("mig", ())):
            raise pynvml.NVMLError_NotFound()
        return FakeHandle(h.index, index)

    def nvmlDeviceGetGpuInstanceId(self, h: FakeHandle) -> int:
        if h.mig is None:
            raise pynvml.NVMLError_InvalidArgument()
        return int(self.trace.gpus[h.index]["mig"][h.mig].get("gpu_instance_id", h.mig + 1))

    # GPM: a "sample" records the frame it was taken at; metrics come from the later one.
    def nvmlGpmQueryDeviceSupport(self, h: FakeHandle) -> Any:
        self._gpu(h, "nvmlGpmQueryDeviceSupport")
        return SimpleNamespace(isSupportedDevice=1)

    def nvmlGpmSampleAlloc(self) -> Any:
        return SimpleNamespace(index=None, frame=None)

    def nvmlGpmSampleGet(self, h: FakeHandle, sample: Any) -> Any:
        self._gpu(h, "nvmlGpmSampleGet")
        sample.index, sample.frame, sample.instance = h.index, self.frame, None
        return sample

    def nvmlGpmMigSampleGet(self, h: FakeHandle, gpu_instance_id: int, sample: Any) -> Any:
        self._gpu(h, "nvmlGpmMigSampleGet")
        ids = [
            int(m.get("gpu_instance_id", k + 1))
            for k, m in enumerate(self.trace.gpus[h.index].get("mig", []))
        ]
        if gpu_instance_id not in ids:
            raise pynvml.NVMLError_InvalidArgument()
        sample.index, sample.frame, sample.instance = (
            h.index,
            self.frame,
            ids.index(gpu_instance_id),
        )
        return sample

    def nvmlGpmSampleFree(self, sample: Any) -> None:
        return None

    class c_nvmlGpmMetricsGet_t:
        def __init__(self) -> None:
            self.version = 0
            self.numMetrics = 0
            self.sample1: Any = None
            self.sample2: Any = None
            self.metrics = [SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0) for _ in range(4)]

    def nvmlGpmMetricsGet(self, req: Any) -> Any:
        values = self.values(req.sample2.frame)[req.sample2.index]
        mig = req.sample2.instance
        for m in req.metrics[: req.numMetrics]:
            m.nvmlReturn = 0
            if mig is not None:
                per = values.get("mig_sm_active", [])
                m.value = float(per[mig]) * 100 if m.metricId == 2 and mig < len(per) else 0.0
                continue
            key = {2: "sm_active", 3: "sm_occupancy", 5: "tensor_active", 10: "dram_active"}.get(
                m.metricId
            )
            x = values.get(key) if key else None
            if x is None and m.metricId in (3, 10):
                m.nvmlReturn, m.value = 3, 0.0  # not in the trace: NOT_SUPPORTED for that metric
                continue
            m.value = float(x) * 100 if x is not None else 0.0
        return req

    # XID events
    def nvmlEventSetCreate(self) -> Any:
        return SimpleNamespace(kind="event-set")

    def nvmlDeviceRegisterEvents(self, h: FakeHandle, event_types: int, event_set: Any) -> None:
        self._gpu(h, "nvmlDeviceRegisterEvents")

    def nvmlEventSetWait(self, event_set: Any, timeout_ms: int) -> Any:
        self._queue_xids()
        if not self._pending_xid:
            raise pynvml.NVMLError_Timeout()
        index, code = self._pending_xid.pop(0)
        return SimpleNamespace(
            device=FakeHandle(index),
            eventType=0x8,
            eventData=code,
            gpuInstanceId=0xFFFFFFFF,
            computeInstanceId=0xFFFFFFFF,
        )

    def nvmlEventSetFree(self, event_set: Any) -> None:
        return None
