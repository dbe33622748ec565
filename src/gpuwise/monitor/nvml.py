"""Reading GPUs through NVML (nvidia-ml-py), with every call going through one choke point.

:class:`NvmlSession` is the only place that calls the NVML library. It maps errors once:

* ``NotSupported`` / ``FunctionNotFound`` / ``NoPermission`` → the metric is absent (``None``),
  logged once per GPU and metric, and listed in :attr:`Snapshot.unsupported`;
* ``GpuIsLost`` → the GPU is marked lost (``GpuSample.lost``; the exporter's ``gpuwise_gpu_up`` = 0);
* library or driver missing at start → :class:`~gpuwise.errors.DeviceError` with a fix;
* any other NVML error on one field → that field is absent for this read, counted in
  :attr:`NvmlSession.error_counts`, logged once per kind; reading goes on.

:class:`NvmlGpuReader` takes the NVML module as a parameter (default: ``pynvml``), which is how
:class:`gpuwise.monitor.fake.FakeGpuReader` runs the very same code over a scripted fake library.
Process details (user, command, cgroup) come from ``/proc``.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import pwd
import re
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from gpuwise.base import settings
from gpuwise.base.nvml import GpuLostError, NvmlSession
from gpuwise.base.nvml import nvml_text as _text
from gpuwise.errors import DeviceError
from gpuwise.monitor.snapshot import GpuSample, MigDeviceSample, ProcessSample, Snapshot

log = logging.getLogger(__name__)

_MIB = 1024**2
# NVML constants (nvml.h, as exposed by nvidia-ml-py 13.615.71); repeated so a fake library need not.
_TEMPERATURE_GPU = 0
_CLOCK_SM, _CLOCK_MEM = 1, 2
_PCIE_TX, _PCIE_RX = 0, 1
_ECC_CORRECTED, _ECC_UNCORRECTED, _VOLATILE_ECC = 0, 1, 0
_EVENT_XID = 0x8
# NVML_GPM_METRIC_* ids (nvml.h GPM enums): SM_UTIL, SM_OCCUPANCY, ANY_TENSOR_UTIL, DRAM_BW_UTIL
_GPM_SM_UTIL, _GPM_SM_OCCUPANCY, _GPM_ANY_TENSOR_UTIL, _GPM_DRAM_BW_UTIL = 2, 3, 5, 10
# NVML field ids (nvml.h NVML_FI_DEV_*): memory temperature, NVLink data throughput (KiB, all
# links) and NVLink error totals
_FI_MEMORY_TEMP, _FI_NVLINK_TX, _FI_NVLINK_RX = 82, 138, 139
_FI_NVLINK_ERRORS = {"crc_flit": 38, "replay": 52, "recovery": 59}
_FIELDS = (_FI_MEMORY_TEMP, _FI_NVLINK_TX, _FI_NVLINK_RX, *_FI_NVLINK_ERRORS.values())
_NO_INSTANCE = 0xFFFFFFFF  # NVML's "not in a MIG instance"


class GpuReader(Protocol):
    """What the exporter, the monitor and the report need from a GPU source."""

    def read(self) -> Snapshot:
        """Read every GPU once."""
        ...

    def close(self) -> None:
        """Release the library."""
        ...


@dataclass(frozen=True)
class ProcInfo:
    """What ``/proc`` says about a process."""

    user: str | None
    command: str | None
    container_id: str | None
    pod_uid: str | None
    namespace: str | None = None
    pod: str | None = None
    container: str | None = None
    plan_id: str | None = None


PLAN_ID_VAR = b"GPUWISE_PLAN_ID="
_PLAN_ID = re.compile(r"[A-Za-z0-9._:/+=-]{1,128}")


def parse_plan_id(environ: bytes) -> str | None:
    """``GPUWISE_PLAN_ID`` from the NUL-separated text of ``/proc/<pid>/environ``; nothing else
    of the environment is kept (it can hold credentials). None when unset or not a plain id."""
    for entry in environ.split(b"\0"):
        if entry.startswith(PLAN_ID_VAR):
            value = entry[len(PLAN_ID_VAR) :].decode(errors="replace")
            return value if _PLAN_ID.fullmatch(value) else None
    return None


_POD = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")
_CONTAINER = re.compile(r"([0-9a-f]{64})")


def parse_cgroup(text: str) -> tuple[str | None, str | None]:
    """(container id, pod uid) from the text of ``/proc/<pid>/cgroup``, either may be None."""
    pod = _POD.search(text)
    ctr = _CONTAINER.search(text)
    return (ctr.group(1)[:12] if ctr else None, pod.group(1).replace("_", "-") if pod else None)


POD_LOG_DIR = Path("/var/log/pods")
"""Where the kubelet keeps one folder per pod, named ``<namespace>_<pod>_<uid>`` with one folder
per container inside: the cgroup's pod UID → namespace, pod and container names (mount it
read-only into the exporter; see deploy/kubernetes)."""


def lookup_pod(uid: str, root: Path = POD_LOG_DIR) -> tuple[str | None, str | None, str | None]:
    """(namespace, pod, container) names of the pod with ``uid`` from the kubelet's pod log folders;
    the container only when the pod has one. All None where the folder is not there."""
    try:
        matches = [d for d in root.glob(f"*_{uid}") if d.is_dir()]
    except OSError:
        return None, None, None
    if not matches:
        return None, None, None
    parts = matches[0].name.rsplit("_", 2)
    if len(parts) != 3:
        return None, None, None
    try:
        containers = [d.name for d in matches[0].iterdir() if d.is_dir()]
    except OSError:
        containers = []
    return parts[0], parts[1], containers[0] if len(containers) == 1 else None


def read_proc_info(
    pid: int, proc_root: Path = Path("/proc"), pod_root: Path = POD_LOG_DIR
) -> ProcInfo:
    """User, command and cgroup ids of ``pid``; fields are None where /proc hides them
    (a process in another PID namespace: run the exporter with ``hostPID: true``). A process in
    a Kubernetes pod also gets its namespace, pod and container names (:func:`lookup_pod`)."""
    base = proc_root / str(pid)
    user = command = container = pod = None
    with contextlib.suppress(OSError, ValueError, KeyError):
        for line in (base / "status").read_text().splitlines():
            if line.startswith("Uid:"):
                uid = int(line.split()[1])
                try:
                    user = pwd.getpwuid(uid).pw_name
                except KeyError:
                    user = str(uid)
                break
    with contextlib.suppress(OSError):
        raw = (base / "cmdline").read_bytes()
        command = raw.replace(b"\0", b" ").decode(errors="replace").strip()[:200] or None
    with contextlib.suppress(OSError):
        container, pod = parse_cgroup((base / "cgroup").read_text())
    ns = pod_name = ctr_name = plan_id = None
    if pod:
        ns, pod_name, ctr_name = lookup_pod(pod, pod_root)
    with contextlib.suppress(OSError):  # readable by the process's owner (or root, hostPID)
        plan_id = parse_plan_id((base / "environ").read_bytes())
    return ProcInfo(user, command, container, pod, ns, pod_name, ctr_name, plan_id)


def read_proc_start(pid: int, proc_root: Path = Path("/proc")) -> int | None:
    """Start time of ``pid`` in clock ticks since boot (``/proc/<pid>/stat`` field 22): with the PID
    it names one process, even after the PID is reused."""
    try:
        text = (proc_root / str(pid) / "stat").read_text()
        return int(text.rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def workload_of(info: ProcInfo) -> str:
    """The job a process belongs to: its pod (``pod:namespace/name`` where the name is known), else
    its container, else ``user/executable``."""
    if info.namespace and info.pod:
        return f"pod:{info.namespace}/{info.pod}"
    if info.pod_uid:
        return f"pod:{info.pod_uid}"
    if info.container_id:
        return f"container:{info.container_id}"
    exe = os.path.basename(info.command.split()[0]) if info.command else "unknown"
    return f"{info.user or 'unknown'}/{exe}"


class NvmlGpuReader:
    """Reads every GPU through NVML into a :class:`Snapshot`. ``lib`` defaults to ``pynvml``."""

    def __init__(
        self,
        lib: Any = None,
        *,
        host: str | None = None,
        process_info: Callable[[int], ProcInfo] | None = None,
        process_start: Callable[[int], int | None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if lib is None:
            import pynvml

            lib = pynvml
        self.session = NvmlSession(lib)
        self.session.init()
        # the `host` label: given, else $GPUWISE_HOST, else $NODE_NAME (the DaemonSet sets it from the
        # downward API: a node's name survives pod rollouts), else this machine's hostname
        self.host = (
            host
            or settings.text("GPUWISE_HOST")
            or settings.text("NODE_NAME")
            or socket.gethostname()
        )
        self._clock = clock
        self._proc_info = process_info or read_proc_info
        self._proc_start = process_start or read_proc_start
        self._proc_cache: dict[tuple[int, int | None], ProcInfo] = {}
        self._util_ts: dict[int, int] = {}
        s = self.session
        self.driver_version = (
            _text(s.call("driver_version", "nvmlSystemGetDriverVersion") or "") or None
        )
        count = s.call("device_count", "nvmlDeviceGetCount")
        if count is None:
            raise DeviceError(
                "NVML cannot count the GPUs", hint="check `nvidia-smi` works on this machine"
            )
        self._handles: list[Any] = []
        self._static: list[tuple[str, str]] = []
        for i in range(int(count)):
            h = s.call("handle", "nvmlDeviceGetHandleByIndex", i, gpu=i)
            self._handles.append(h)
            uuid = _text(s.call("uuid", "nvmlDeviceGetUUID", h, gpu=i) or f"GPU-index-{i}")
            name = _text(s.call("name", "nvmlDeviceGetName", h, gpu=i) or "unknown")
            self._static.append((uuid, name))
        # renamed from "ClocksThrottleReasons" in NVML 12.x; older nvidia-ml-py has only the old name
        self._throttle_fn = (
            "nvmlDeviceGetCurrentClocksEventReasons"
            if hasattr(lib, "nvmlDeviceGetCurrentClocksEventReasons")
            else "nvmlDeviceGetCurrentClocksThrottleReasons"
        )
        self._lost: set[int] = set()
        self._xid: list[dict[int, int]] = [{} for _ in self._handles]
        self._last_xid: list[int | None] = [None for _ in self._handles]
        self._pci: list[str | None] = [
            self._bus_id(i, h) if h is not None else None for i, h in enumerate(self._handles)
        ]
        self._event_set = self._register_xid_events()
        self._gpm_prev: dict[tuple[int, int | None], Any] = {}
        self._gpm_ok = [
            bool(
                getattr(
                    s.call("sm_active", "nvmlGpmQueryDeviceSupport", h, gpu=i)
                    if h is not None
                    else None,
                    "isSupportedDevice",
                    0,
                )
            )
            for i, h in enumerate(self._handles)
        ]

    # -- lifecycle -----------------------------------------------------------------------
    def close(self) -> None:
        if self._event_set is not None:
            self.session.call("xid", "nvmlEventSetFree", self._event_set)
            self._event_set = None
        for sample in self._gpm_prev.values():
            self.session.call("sm_active", "nvmlGpmSampleFree", sample)
        self._gpm_prev.clear()
        self.session.shutdown()

    def __enter__(self) -> NvmlGpuReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading -------------------------------------------------------------------------
    def read(self) -> Snapshot:
        now = self._clock()
        self._drain_xid_events()
        gpus = tuple(self._read_gpu(i) for i in range(len(self._handles)))
        return Snapshot(
            timestamp_s=now,
            host=self.host,
            driver_version=self.driver_version,
            gpus=gpus,
            unsupported=tuple(sorted(self.session.unsupported)),
        )

    def _read_gpu(self, i: int) -> GpuSample:
        uuid, name = self._static[i]
        h = self._handles[i]
        if i not in self._lost and h is not None:
            try:
                return self._read_live(i, h, uuid, name)
            except GpuLostError as exc:
                log.error("GPU %d (%s) is lost: %s", i, uuid, exc)
                self._lost.add(i)
        return GpuSample(
            index=i,
            uuid=uuid,
            name=name,
            lost=True,
            utilization_gpu_ratio=None,
            utilization_memory_ratio=None,
            sm_active_ratio=None,
            tensor_active_ratio=None,
            memory_used_bytes=None,
            memory_total_bytes=None,
            power_w=None,
            power_limit_w=None,
            temperature_c=None,
            sm_clock_mhz=None,
            memory_clock_mhz=None,
            throttle_reasons_mask=None,
            pcie_tx_bytes_per_s=None,
            pcie_rx_bytes_per_s=None,
            ecc_corrected_total=None,
            ecc_uncorrected_total=None,
            xid_counts=tuple(sorted(self._xid[i].items())),
            mig_enabled=False,
            mig_devices=(),
            processes=(),
            pci_bus_id=self._pci[i],
            last_xid=self._last_xid[i],
        )

    def _read_live(self, i: int, h: Any, uuid: str, name: str) -> GpuSample:
        c = self.session.call
        util = c("utilization", "nvmlDeviceGetUtilizationRates", h, gpu=i)
        mem = c("memory", "nvmlDeviceGetMemoryInfo", h, gpu=i)
        power_mw = c("power", "nvmlDeviceGetPowerUsage", h, gpu=i)
        limit_mw = c("power_limit", "nvmlDeviceGetEnforcedPowerLimit", h, gpu=i)
        temp = c("temperature", "nvmlDeviceGetTemperature", h, _TEMPERATURE_GPU, gpu=i)
        sm_clock = c("clocks", "nvmlDeviceGetClockInfo", h, _CLOCK_SM, gpu=i)
        mem_clock = c("clocks", "nvmlDeviceGetClockInfo", h, _CLOCK_MEM, gpu=i)
        throttle = c("throttle", self._throttle_fn, h, gpu=i)
        tx = c("pcie", "nvmlDeviceGetPcieThroughput", h, _PCIE_TX, gpu=i)
        rx = c("pcie", "nvmlDeviceGetPcieThroughput", h, _PCIE_RX, gpu=i)
        ecc_c = c("ecc", "nvmlDeviceGetTotalEccErrors", h, _ECC_CORRECTED, _VOLATILE_ECC, gpu=i)
        ecc_u = c("ecc", "nvmlDeviceGetTotalEccErrors", h, _ECC_UNCORRECTED, _VOLATILE_ECC, gpu=i)
        mig_mode = c("mig", "nvmlDeviceGetMigMode", h, gpu=i)
        mig_on = bool(mig_mode and mig_mode[0] == 1)
        gpm = {} if mig_on else self._gpm(i, h)
        energy = c("energy", "nvmlDeviceGetTotalEnergyConsumption", h, gpu=i)
        remap = c(
            "remapped_rows", "nvmlDeviceGetRemappedRows", h, gpu=i
        )  # (corr, unc, pending, failed)
        replay = c("pcie_replay", "nvmlDeviceGetPcieReplayCounter", h, gpu=i)
        enc = c("encoder", "nvmlDeviceGetEncoderUtilization", h, gpu=i)  # [util %, period µs]
        dec = c("decoder", "nvmlDeviceGetDecoderUtilization", h, gpu=i)
        fields = self._fields(i, h)
        processes = self._processes(i, h)
        return GpuSample(
            index=i,
            uuid=uuid,
            name=name,
            lost=False,
            utilization_gpu_ratio=None if util is None else util.gpu / 100,
            utilization_memory_ratio=None if util is None else util.memory / 100,
            sm_active_ratio=gpm.get(_GPM_SM_UTIL),
            tensor_active_ratio=gpm.get(_GPM_ANY_TENSOR_UTIL),
            memory_used_bytes=None if mem is None else int(mem.used),
            memory_total_bytes=None if mem is None else int(mem.total),
            power_w=None if power_mw is None else power_mw / 1000,
            power_limit_w=None if limit_mw is None else limit_mw / 1000,
            temperature_c=None if temp is None else float(temp),
            sm_clock_mhz=None if sm_clock is None else float(sm_clock),
            memory_clock_mhz=None if mem_clock is None else float(mem_clock),
            throttle_reasons_mask=None if throttle is None else int(throttle),
            pcie_tx_bytes_per_s=None if tx is None else tx * 1000.0,  # NVML reports KB/s
            pcie_rx_bytes_per_s=None if rx is None else rx * 1000.0,
            ecc_corrected_total=None if ecc_c is None else int(ecc_c),
            ecc_uncorrected_total=None if ecc_u is None else int(ecc_u),
            xid_counts=tuple(sorted(self._xid[i].items())),
            pci_bus_id=self._pci[i],
            last_xid=self._last_xid[i],
            mig_enabled=mig_on,
            mig_devices=self._mig_devices(i, h, processes) if mig_on else (),
            processes=processes,
            mig_slices_total=(c("mig", "nvmlDeviceGetMaxMigDeviceCount", h, gpu=i) or None)
            if mig_on
            else None,
            energy_joules_total=None if energy is None else energy / 1000,
            memory_temperature_c=fields.get(_FI_MEMORY_TEMP),
            remapped_rows_correctable=None if remap is None else int(remap[0]),
            remapped_rows_uncorrectable=None if remap is None else int(remap[1]),
            remap_pending=None if remap is None else bool(remap[2]),
            remap_failed=None if remap is None else bool(remap[3]),
            pcie_replay_total=None if replay is None else int(replay),
            nvlink_tx_bytes_total=None
            if _FI_NVLINK_TX not in fields
            else fields[_FI_NVLINK_TX] * 1024,
            nvlink_rx_bytes_total=None
            if _FI_NVLINK_RX not in fields
            else fields[_FI_NVLINK_RX] * 1024,
            nvlink_errors=tuple(
                (k, int(fields[f])) for k, f in _FI_NVLINK_ERRORS.items() if f in fields
            ),
            dram_active_ratio=gpm.get(_GPM_DRAM_BW_UTIL),
            sm_occupancy_ratio=gpm.get(_GPM_SM_OCCUPANCY),
            encoder_utilization_ratio=None if enc is None else enc[0] / 100,
            decoder_utilization_ratio=None if dec is None else dec[0] / 100,
        )

    def _fields(self, i: int, h: Any) -> dict[int, float]:
        """NVML field values that answered (memory temperature, NVLink counters), by field id."""
        got = self.session.call("fields", "nvmlDeviceGetFieldValues", h, list(_FIELDS), gpu=i) or []
        out: dict[int, float] = {}
        for fv in got:
            if getattr(fv, "nvmlReturn", 1) != 0:
                continue  # that one field is not supported here
            v = fv.value
            # valueType: 0 double, 1 uint, 2 ulong, 3 ulonglong, 4 slonglong, 5 sint (nvml.h nvmlValueType_t)
            out[int(fv.fieldId)] = float(
                {
                    0: getattr(v, "dVal", 0),
                    1: getattr(v, "uiVal", 0),
                    2: getattr(v, "ulVal", 0),
                    3: getattr(v, "ullVal", 0),
                    4: getattr(v, "sllVal", 0),
                    5: getattr(v, "siVal", 0),
                }.get(int(fv.valueType), 0)
            )
        return out

    def _processes(self, i: int, h: Any) -> tuple[ProcessSample, ...]:
        c = self.session.call
        procs = c("processes", "nvmlDeviceGetComputeRunningProcesses", h, gpu=i) or []
        sm_util: dict[int, float] = {}
        if procs:
            samples = (
                c(
                    "process_sm_util",
                    "nvmlDeviceGetProcessUtilization",
                    h,
                    self._util_ts.get(i, 0),
                    gpu=i,
                    not_found_ok=True,
                )
                or []
            )
            for u in samples:
                sm_util[int(u.pid)] = min(1.0, float(u.smUtil) / 100)
                self._util_ts[i] = max(self._util_ts.get(i, 0), int(getattr(u, "timeStamp", 0)))
        out = []
        seen = set()
        for p in procs:
            pid = int(p.pid)
            key = (pid, self._proc_start(pid))  # a reused PID is another process
            seen.add(key)
            info = self._proc_cache.get(key)
            if info is None:
                info = self._proc_cache[key] = self._proc_info(pid)
            used = getattr(p, "usedGpuMemory", None)
            gi = getattr(p, "gpuInstanceId", _NO_INSTANCE)
            out.append(
                ProcessSample(
                    pid=pid,
                    gpu_memory_bytes=None if used is None else int(used),
                    user=info.user,
                    command=info.command,
                    container_id=info.container_id,
                    pod_uid=info.pod_uid,
                    workload=workload_of(info),
                    gpu_instance_id=None if gi in (None, _NO_INSTANCE) else int(gi),
                    sm_utilization_ratio=sm_util.get(pid),
                    namespace=info.namespace,
                    pod=info.pod,
                    container=info.container,
                    plan_id=info.plan_id,
                )
            )
        if len(self._proc_cache) > 4096:  # forget exited processes now and then
            self._proc_cache = {k: v for k, v in self._proc_cache.items() if k in seen}
        return tuple(out)

    def _mig_devices(
        self, i: int, h: Any, processes: tuple[ProcessSample, ...]
    ) -> tuple[MigDeviceSample, ...]:
        c = self.session.call
        n = c("mig", "nvmlDeviceGetMaxMigDeviceCount", h, gpu=i) or 0
        out = []
        for k in range(int(n)):
            mh = c("mig", "nvmlDeviceGetMigDeviceHandleByIndex", h, k, gpu=i, not_found_ok=True)
            if mh is None:
                continue
            mem = c("mig", "nvmlDeviceGetMemoryInfo", mh, gpu=i)
            gi = c("mig", "nvmlDeviceGetGpuInstanceId", mh, gpu=i)
            attrs = c("mig", "nvmlDeviceGetAttributes", mh, gpu=i)
            slices = None if attrs is None else int(attrs.gpuInstanceSliceCount)
            total = None if mem is None else int(mem.total)
            # NVIDIA's names round the instance's GiB up to 5 (9856 MiB → 1g.10gb, 40192 → 3g.40gb);
            # a derived label, exact for A100/H100 80 GB profiles, not for every H200 one
            profile = (
                f"{slices}g.{math.ceil(total / 2**30 / 5) * 5}gb" if slices and total else None
            )
            gpm = {} if gi is None else self._gpm(i, h, gpu_instance=int(gi))
            out.append(
                MigDeviceSample(
                    index=k,
                    uuid=_text(c("mig", "nvmlDeviceGetUUID", mh, gpu=i) or f"MIG-{i}-{k}"),
                    gpu_instance_id=gi,
                    memory_used_bytes=None if mem is None else int(mem.used),
                    memory_total_bytes=total,
                    slices=slices,
                    profile=profile,
                    sm_active_ratio=gpm.get(_GPM_SM_UTIL),
                    processes=tuple(
                        p for p in processes if gi is not None and p.gpu_instance_id == gi
                    ),
                )
            )
        return tuple(out)

    def _gpm(self, i: int, h: Any, gpu_instance: int | None = None) -> dict[int, float]:
        """GPM metrics (0–1, by metric id) from two samples one read apart (Hopper+): of the whole
        GPU, or of one MIG instance (``nvmlGpmMigSampleGet``)."""
        if not self._gpm_ok[i]:
            self.session.unsupported.add("sm_active")
            return {}
        c = self.session.call
        sample = c("sm_active", "nvmlGpmSampleAlloc", gpu=i)
        if sample is None:
            return {}
        got_sample = (
            c("sm_active", "nvmlGpmSampleGet", h, sample, gpu=i)
            if gpu_instance is None
            else c("sm_active", "nvmlGpmMigSampleGet", h, gpu_instance, sample, gpu=i)
        )
        if got_sample is None:
            c("sm_active", "nvmlGpmSampleFree", sample, gpu=i)
            return {}
        key = (i, gpu_instance)
        prev, self._gpm_prev[key] = self._gpm_prev.get(key), sample
        if prev is None:
            return {}
        ids = (_GPM_SM_UTIL, _GPM_ANY_TENSOR_UTIL, _GPM_DRAM_BW_UTIL, _GPM_SM_OCCUPANCY)
        try:
            lib = self.session.lib  # a ctypes struct, not an NVML call
            req = lib.c_nvmlGpmMetricsGet_t()
            req.version = getattr(lib, "NVML_GPM_METRICS_GET_VERSION", 1)
            req.numMetrics = len(ids)
            req.sample1, req.sample2 = prev, sample
            for n, metric in enumerate(ids):
                req.metrics[n].metricId = metric
            got = c("sm_active", "nvmlGpmMetricsGet", req, gpu=i)
        finally:
            c("sm_active", "nvmlGpmSampleFree", prev, gpu=i)
        if got is None:
            return {}
        # GPM gives percent 0.0-100.0 (nvml.h NVML_GPM_METRIC_SM_UTIL comment)
        return {
            int(m.metricId): m.value / 100
            for m in got.metrics[: len(ids)]
            if getattr(m, "nvmlReturn", 0) == 0
        }

    # -- XID events ----------------------------------------------------------------------
    def _register_xid_events(self) -> Any:
        s = self.session
        event_set = s.call("xid", "nvmlEventSetCreate")
        if event_set is None:
            return None
        for i, h in enumerate(self._handles):
            if h is not None:
                with contextlib.suppress(GpuLostError):
                    s.call("xid", "nvmlDeviceRegisterEvents", h, _EVENT_XID, event_set, gpu=i)
        return event_set

    def _drain_xid_events(self) -> None:
        """Count every pending XID event (non-blocking: a 0 ms wait raises Timeout when none)."""
        if self._event_set is None:
            return
        for _ in range(1000):
            data = self.session.call("xid", "nvmlEventSetWait", self._event_set, 0, timeout_ok=True)
            if data is None:  # none pending (Timeout), or the wait failed (counted by the session)
                return
            if not data.eventType & _EVENT_XID:
                continue
            index = self._index_of(data.device)
            if index is not None:
                code = int(data.eventData)
                self._xid[index][code] = self._xid[index].get(code, 0) + 1
                self._last_xid[index] = code

    def _bus_id(self, i: int, h: Any) -> str | None:
        """The GPU's PCI bus id (static), None where NVML does not say."""
        bus = getattr(self.session.call("pci", "nvmlDeviceGetPciInfo", h, gpu=i), "busId", None)
        return None if bus is None else _text(bus)

    def _index_of(self, device: Any) -> int | None:
        for i, h in enumerate(self._handles):
            if h is device:
                return i
        uuid = self.session.call("xid", "nvmlDeviceGetUUID", device)
        if uuid is not None:
            for i, (u, _) in enumerate(self._static):
                if u == _text(uuid):
                    return i
        return None
