"""A replayable fake NVML, for tests, demos and users without a GPU.

:class:`FakeNvml` implements the part of the ``pynvml`` module gpuwise calls, scripted by a
trace, and raises the real ``pynvml.NVMLError_*`` classes where a real GPU would (a MIG GPU
raises ``NVMLError_NotSupported`` for utilization; a GPU that fell off the bus raises
``NVMLError_GpuIsLost``). :class:`FakeGpuReader` is the real :class:`NvmlGpuReader` driven by
it, so the choke point, the error mapping and the snapshot code run unchanged.

A trace (JSON or YAML) is::

    name: my-trace
    interval_s: 600            # how long one frame lasts (a frame may say repeat: N)
    host: fake-host
    gpus:                      # static facts
      - {name: NVIDIA H100 80GB HBM3, uuid: GPU-…, memory_total_mib: 81559, power_limit_w: 700,
         unsupported: [sm_active, pcie], mig: [{memory_total_mib: 9856}]}
    frames:
      - repeat: 6
        gpus:
          - {util: 95, mem_util: 40, memory_used_mib: 60000, power_w: 650, temperature_c: 70,
             sm_active: 0.6, tensor_active: 0.3, throttle: 0, xid: [79], lost: false,
             processes: [{pid: 4242, memory_mib: 59000, user: alice, command: python train.py,
                          workload: train-llama}]}

``gpuwise monitor --fake TRACE`` advances one frame per read (looping); ``gpuwise report --fake``
stretches the frames over the asked window.
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml

from gpuwise.errors import DataFileError, InputError, did_you_mean, parse_error_text
from gpuwise.monitor.nvml import NvmlGpuReader, ProcInfo
from gpuwise.monitor.snapshot import ProcessSample, Snapshot

_MIB = 1024**2
# Metric groups a trace may mark unsupported, and the NVML functions that then raise NotSupported.
_GROUP_FUNCTIONS: dict[str, tuple[str, ...]] = {
    "utilization": ("nvmlDeviceGetUtilizationRates",),
    "power": ("nvmlDeviceGetPowerUsage", "nvmlDeviceGetEnforcedPowerLimit"),
    "temperature": ("nvmlDeviceGetTemperature",),
    "clocks": ("nvmlDeviceGetClockInfo",),
    "throttle": ("nvmlDeviceGetCurrentClocksEventReasons",),
    "pcie": ("nvmlDeviceGetPcieThroughput",),
    "ecc": ("nvmlDeviceGetTotalEccErrors",),
    "sm_active": ("nvmlGpmQueryDeviceSupport",),
    "processes": ("nvmlDeviceGetComputeRunningProcesses",),
    "process_sm_util": ("nvmlDeviceGetProcessUtilization",),
    "energy": ("nvmlDeviceGetTotalEnergyConsumption",),
    "fields": ("nvmlDeviceGetFieldValues",),
    "remapped_rows": ("nvmlDeviceGetRemappedRows",),
    "pcie_replay": ("nvmlDeviceGetPcieReplayCounter",),
    "encoder": ("nvmlDeviceGetEncoderUtilization", "nvmlDeviceGetDecoderUtilization"),
}
# Frame fields: numbers ≥ 0, ratios 0–1, percentages 0–100, counters (whole numbers ≥ 0).
_NUMBER_KEYS = {
    "memory_used_mib",
    "power_w",
    "temperature_c",
    "sm_clock_mhz",
    "memory_clock_mhz",
    "pcie_tx_kb_s",
    "pcie_rx_kb_s",
    "energy_j",
    "memory_temperature_c",
    "nvlink_tx_kib",
    "nvlink_rx_kib",
}
_PERCENT_KEYS = {"util", "mem_util", "enc_util", "dec_util"}
_RATIO_KEYS = {"sm_active", "tensor_active", "dram_active", "sm_occupancy"}
_COUNT_KEYS = {
    "throttle",
    "ecc_corrected",
    "ecc_uncorrected",
    "remap_correctable",
    "remap_uncorrectable",
    "pcie_replay",
    "pstate",
}
_BOOL_KEYS = {"lost", "remap_pending", "remap_failed"}
_LIST_KEYS = {"xid", "processes", "mig_used_mib", "mig_sm_active", "nvlink_errors"}
_FRAME_KEYS = _NUMBER_KEYS | _PERCENT_KEYS | _RATIO_KEYS | _COUNT_KEYS | _BOOL_KEYS | _LIST_KEYS
_PROCESS_KEYS = {
    "pid",
    "memory_mib",
    "user",
    "command",
    "workload",
    "container_id",
    "pod_uid",
    "namespace",
    "pod",
    "container",
    "mig",
    "sm_util",
    "start",
}
_NVLINK_ERROR_KINDS = {"crc_flit": 38, "replay": 52, "recovery": 59}
MAX_FRAMES = 10_000_000
"""Most frames a trace may expand to (the sum of its ``repeat``s): a year of 3-second frames."""


@dataclass(frozen=True)
class FakeHandle:
    """A device handle of the fake library: GPU ``index``, and ``mig`` index for MIG devices."""

    index: int
    mig: int | None = None


@dataclass(frozen=True)
class Trace:
    """A parsed trace: static GPU facts and the frames to replay."""

    name: str
    interval_s: float
    host: str
    gpus: tuple[Mapping[str, Any], ...]
    frames: tuple[tuple[int, tuple[Mapping[str, Any], ...]], ...]
    """(repeat, per-GPU values) per frame."""

    @property
    def duration_s(self) -> float:
        return sum(r for r, _ in self.frames) * self.interval_s


def _num(value: Any, where: str, *, minimum: float = 0.0) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or math.isnan(value)
        or math.isinf(value)
        or value < minimum
    ):
        raise DataFileError(
            f"{where}: expected a finite number ≥ {minimum:g}, got {value!r}",
            hint="fix that value in the trace file",
        )
    return float(value)


def _int(value: Any, where: str, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise DataFileError(
            f"{where}: expected a whole number ≥ {minimum}, got {value!r}",
            hint="fix that value in the trace file",
        )
    return value


def _ratio(value: Any, where: str, top: float) -> float:
    x = _num(value, where)
    if x > top:
        raise DataFileError(
            f"{where}: expected a number from 0 to {top:g}, got {value!r}",
            hint="fix that value in the trace file",
        )
    return x


def _check_frame_gpu(g: Mapping[str, Any], where: str, mig_count: int) -> None:
    """Every field of one GPU in one frame has the type and range the fake serves."""
    for key, value in g.items():
        w = f"{where}.{key}"
        if value is None and key in _RATIO_KEYS:
            continue  # "not read this frame"
        if key in _NUMBER_KEYS:
            _num(value, w)
        elif key in _PERCENT_KEYS:
            _ratio(value, w, 100)
        elif key in _RATIO_KEYS:
            _ratio(value, w, 1)
        elif key in _COUNT_KEYS:
            _int(value, w)
        elif key in _BOOL_KEYS:
            if not isinstance(value, bool):
                raise DataFileError(
                    f"{w}: expected true or false, got {value!r}",
                    hint="fix that value in the trace file",
                )
        elif key == "xid":
            if not isinstance(value, list):
                raise DataFileError(
                    f"{w}: expected a list of XID codes, e.g. [79], got {value!r}",
                    hint="fix that value in the trace file",
                )
            for n, code in enumerate(value):
                _int(code, f"{w}[{n}]", minimum=1)
        elif key in ("mig_used_mib", "mig_sm_active"):
            if not isinstance(value, list) or len(value) > mig_count:
                raise DataFileError(
                    f"{w}: expected a list of at most {mig_count} values (one per MIG instance), "
                    f"got {value!r}",
                    hint="fix that value in the trace file",
                )
            for n, x in enumerate(value):
                _num(x, f"{w}[{n}]") if key == "mig_used_mib" else _ratio(x, f"{w}[{n}]", 1)
        elif key == "nvlink_errors":
            if not isinstance(value, Mapping) or not set(value) <= _NVLINK_ERROR_KINDS.keys():
                raise DataFileError(
                    f"{w}: expected a mapping of {', '.join(_NVLINK_ERROR_KINDS)} to counts, got "
                    f"{value!r}",
                    hint="fix that value in the trace file",
                )
            for kind, n in value.items():
                _int(n, f"{w}.{kind}")
        elif key == "processes":
            if not isinstance(value, list):
                raise DataFileError(
                    f"{w}: expected a list of processes (mappings with a pid), got {value!r}",
                    hint="write processes: [] for none",
                )
            for n, proc in enumerate(value):
                pw = f"{w}[{n}]"
                if not isinstance(proc, Mapping):
                    raise DataFileError(
                        f"{pw}: expected a mapping with a pid, got {proc!r}",
                        hint="fix that process",
                    )
                unknown = set(proc) - _PROCESS_KEYS
                if unknown:
                    bad = sorted(unknown)[0]
                    raise DataFileError(
                        f"{pw}: unknown field {bad!r}",
                        hint=f"use only {', '.join(sorted(_PROCESS_KEYS))}",
                        suggestions=did_you_mean(bad, _PROCESS_KEYS),
                    )
                if "pid" not in proc:
                    raise DataFileError(
                        f"{pw}: missing field 'pid'", hint="give every process its pid"
                    )
                _int(proc["pid"], f"{pw}.pid", minimum=1)
                if "memory_mib" in proc:
                    _num(proc["memory_mib"], f"{pw}.memory_mib")
                if "sm_util" in proc:
                    _ratio(proc["sm_util"], f"{pw}.sm_util", 100)
                if "start" in proc:
                    _int(proc["start"], f"{pw}.start")
                if "mig" in proc and (_int(proc["mig"], f"{pw}.mig") >= mig_count):
                    raise DataFileError(
                        f"{pw}.mig: instance {proc['mig']} does not exist (the GPU declares "
                        f"{mig_count} MIG instances)",
                        hint="fix that process",
                    )
                for text in (
                    "user",
                    "command",
                    "workload",
                    "container_id",
                    "pod_uid",
                    "namespace",
                    "pod",
                    "container",
                ):
                    if text in proc and not isinstance(proc[text], str):
                        raise DataFileError(
                            f"{pw}.{text}: expected text, got {proc[text]!r}", hint="quote it"
                        )


def parse_trace(data: Any, origin: str) -> Trace:
    """Check a loaded trace document and return a :class:`Trace`; errors name the field."""
    if not isinstance(data, Mapping):
        raise DataFileError(
            f"{origin}: a trace is a mapping with 'gpus' and 'frames'",
            hint="see `gpuwise monitor --help` for the trace format",
        )
    gpus = data.get("gpus")
    frames = data.get("frames")
    if not isinstance(gpus, list) or not gpus or not all(isinstance(g, Mapping) for g in gpus):
        raise DataFileError(
            f"{origin}: 'gpus' must be a non-empty list of mappings", hint="list the GPUs"
        )
    if not isinstance(frames, list) or not frames:
        raise DataFileError(
            f"{origin}: 'frames' must be a non-empty list", hint="add at least one frame"
        )
    for k, g in enumerate(gpus):
        _num(g.get("memory_total_mib", 81559), f"{origin}: gpus[{k}].memory_total_mib", minimum=1)
        mig = g.get("mig", [])
        if (
            not isinstance(mig, list)
            or not all(isinstance(m, Mapping) for m in mig)
            or len(mig) > 7
        ):
            raise DataFileError(
                f"{origin}: gpus[{k}].mig: expected a list of up to 7 MIG instances (mappings)",
                hint="fix the MIG list",
            )
        for n, m in enumerate(mig):
            _int(m.get("slices", 1), f"{origin}: gpus[{k}].mig[{n}].slices", minimum=1)
            _num(
                m.get("memory_total_mib", 9856),
                f"{origin}: gpus[{k}].mig[{n}].memory_total_mib",
                minimum=1,
            )
        for group in g.get("unsupported", ()):
            if group not in _GROUP_FUNCTIONS:
                raise DataFileError(
                    f"{origin}: gpus[{k}].unsupported: unknown metric group {group!r}",
                    hint=f"use one of {', '.join(_GROUP_FUNCTIONS)}",
                    suggestions=did_you_mean(str(group), _GROUP_FUNCTIONS),
                )
    out = []
    total_frames = 0
    for n, frame in enumerate(frames):
        where = f"{origin}: frames[{n}]"
        if not isinstance(frame, Mapping) or not isinstance(frame.get("gpus"), list):
            raise DataFileError(
                f"{where} must be a mapping with a 'gpus' list", hint="fix that frame"
            )
        if len(frame["gpus"]) != len(gpus):
            raise DataFileError(
                f"{where} has {len(frame['gpus'])} GPUs, the trace declares {len(gpus)}",
                hint="give one entry per GPU in every frame",
            )
        repeat = _int(frame.get("repeat", 1), f"{where}.repeat", minimum=1)
        total_frames += repeat
        if total_frames > MAX_FRAMES:
            raise DataFileError(
                f"{where}.repeat: the trace expands to more than {MAX_FRAMES:,} frames",
                hint="use a longer interval_s and a smaller repeat",
            )
        for k, g in enumerate(frame["gpus"]):
            if not isinstance(g, Mapping):
                raise DataFileError(f"{where}.gpus[{k}] must be a mapping", hint="fix that frame")
            unknown = set(g) - _FRAME_KEYS
            if unknown:
                bad = sorted(unknown)[0]
                raise DataFileError(
                    f"{where}.gpus[{k}]: unknown field {bad!r}",
                    hint=f"use only {', '.join(sorted(_FRAME_KEYS))}",
                    suggestions=did_you_mean(bad, _FRAME_KEYS),
                )
            _check_frame_gpu(g, f"{where}.gpus[{k}]", len(gpus[k].get("mig", [])))
        out.append((repeat, tuple(frame["gpus"])))
    interval = _num(data.get("interval_s", 1.0), f"{origin}: interval_s", minimum=1e-3)
    return Trace(
        name=str(data.get("name", origin)),
        interval_s=interval,
        host=str(data.get("host", "fake-host")),
        gpus=tuple(gpus),
        frames=tuple(out),
    )


def load_trace(path: str | Path) -> Trace:
    """Read a trace file (JSON or YAML)."""
    p = Path(path)
    try:
        text = p.read_text("utf-8")
    except UnicodeDecodeError as exc:
        raise DataFileError(
            f"{p}: {parse_error_text(exc)}", hint="give a JSON or YAML trace saved as UTF-8"
        ) from None
    except OSError as exc:
        raise InputError(
            f"cannot read trace {p}: {exc.strerror}",
            hint=f"give an existing trace file or a scenario name ({', '.join(SCENARIOS)})",
        ) from exc
    import yaml

    try:
        data = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, RecursionError, yaml.YAMLError) as exc:  # JSONDecodeError is a ValueError
        raise DataFileError(
            f"{p} is not valid JSON/YAML ({parse_error_text(exc)})", hint="fix the trace file"
        ) from exc
    return parse_trace(data, str(p))


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


class FakeGpuReader(NvmlGpuReader):
    """The real NVML reader over :class:`FakeNvml`; each :meth:`read` serves the next frame."""

    def __init__(self, trace: Trace, *, host: str | None = None, clock: Any = None) -> None:
        self.fake = FakeNvml(trace)
        kwargs: dict[str, Any] = {}
        if clock is not None:
            kwargs["clock"] = clock
        super().__init__(
            self.fake,
            host=host or trace.host,
            process_info=self._fake_proc_info,
            process_start=self._fake_proc_start,
            **kwargs,
        )
        self._first = True

    def _fake_proc(self, pid: int) -> Mapping[str, Any] | None:
        for g in self.fake.values():
            for p in g.get("processes", ()):
                if int(p["pid"]) == pid:
                    found: Mapping[str, Any] = p
                    return found
        return None

    def _fake_proc_start(self, pid: int) -> int | None:
        p = self._fake_proc(pid)
        return None if p is None else int(p.get("start", 0))

    def _fake_proc_info(self, pid: int) -> ProcInfo:
        p = self._fake_proc(pid)
        if p is None:
            return ProcInfo(None, None, None, None)
        return ProcInfo(
            p.get("user"),
            p.get("command"),
            p.get("container_id"),
            p.get("pod_uid"),
            p.get("namespace"),
            p.get("pod"),
            p.get("container"),
        )

    @classmethod
    def from_trace(cls, path: str | Path, **kwargs: Any) -> FakeGpuReader:
        """Replay a recorded or hand-written trace file (JSON/YAML)."""
        return cls(load_trace(path), **kwargs)

    @classmethod
    def from_scenario(cls, name: str, **kwargs: Any) -> FakeGpuReader:
        """One of the built-in scenarios: see :data:`SCENARIOS`."""
        return cls(scenario(name), **kwargs)

    def read(self) -> Snapshot:
        if not self._first:
            self.fake.advance()
        self._first = False
        snap = super().read()
        workloads = {
            int(p["pid"]): str(p["workload"])
            for g in self.fake.values()
            for p in g.get("processes", ())
            if p.get("workload")
        }
        if not workloads:
            return snap
        from dataclasses import replace

        def named(p: ProcessSample) -> ProcessSample:
            return replace(p, workload=workloads.get(p.pid, p.workload))

        gpus = tuple(
            replace(
                g,
                processes=tuple(named(p) for p in g.processes),
                mig_devices=tuple(
                    replace(m, processes=tuple(named(p) for p in m.processes))
                    for m in g.mig_devices
                ),
            )
            for g in snap.gpus
        )
        return replace(snap, gpus=gpus)


# -- built-in scenarios ------------------------------------------------------------------
_H100 = {"name": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559, "power_limit_w": 700}
_A100 = {
    "name": "NVIDIA A100-SXM4-80GB",
    "memory_total_mib": 81920,
    "power_limit_w": 400,
    "unsupported": ["sm_active"],
}  # GPM needs Hopper or newer


def _proc(pid: int, mib: float, user: str, command: str, workload: str) -> dict[str, Any]:
    return {
        "pid": pid,
        "memory_mib": int(mib),
        "user": user,
        "command": command,
        "workload": workload,
    }


def _busy(mib: float, proc: dict[str, Any], **over: Any) -> dict[str, Any]:
    base = {
        "util": 97,
        "mem_util": 45,
        "memory_used_mib": int(mib),
        "power_w": 640,
        "temperature_c": 68,
        "sm_active": 0.62,
        "tensor_active": 0.35,
        "sm_clock_mhz": 1980,
        "pcie_tx_kb_s": 150000,
        "pcie_rx_kb_s": 900000,
        "dram_active": 0.41,
        "sm_occupancy": 0.28,
        "memory_temperature_c": 62,
        "nvlink_tx_kib": 7_500_000,
        "nvlink_rx_kib": 7_400_000,
        "nvlink_errors": {"crc_flit": 0, "replay": 0, "recovery": 0},
        "processes": [{**proc, "sm_util": 93}],
    }
    base.update(over)
    return base


def _idle(mib: float = 0, procs: Sequence[dict[str, Any]] = (), **over: Any) -> dict[str, Any]:
    base = {
        "util": 0,
        "mem_util": 0,
        "memory_used_mib": int(mib),
        "power_w": 72,
        "temperature_c": 31,
        "sm_active": 0.0,
        "tensor_active": 0.0,
        "sm_clock_mhz": 345,
        "throttle": 0x1,
        "processes": list(procs),
    }
    base.update(over)
    return base


def _scenario_idle() -> dict[str, Any]:
    """2 × H100 over 24 h (10-min frames): GPU 0 trains 6 h, then a notebook holds 20 GiB idle for
    18 h; GPU 1 sits empty all day. Known answer: 42 idle GPU-hours of 48."""
    nb = _proc(5151, 20480, "bob", "python -m jupyter lab", "bob/notebook")
    train = _proc(4242, 60000, "alice", "python train.py", "alice/train")
    return {
        "name": "idle",
        "interval_s": 600,
        "host": "fake-idle",
        "gpus": [
            {**_H100, "uuid": "GPU-00000000-idle-0000-0000-000000000000"},
            {**_H100, "uuid": "GPU-00000001-idle-0000-0000-000000000001"},
        ],
        "frames": [
            {"repeat": 36, "gpus": [_busy(61000, train), _idle()]},
            {"repeat": 108, "gpus": [_idle(21000, [nb], util=1), _idle()]},
        ],
    }


def _scenario_leak() -> dict[str, Any]:
    """1 × A100-80GB: a job's memory grows 2 GiB a frame until it dies of OOM, then restarts."""
    frames = []
    for k in range(40):
        used = 8000 + k * 2048
        if used >= 81920:
            frames.append({"gpus": [_idle(0)]})
            break
        frames.append(
            {
                "gpus": [
                    _busy(
                        used,
                        _proc(777, used - 500, "carol", "python serve.py", "carol/serve"),
                        sm_active=None,
                        tensor_active=None,
                        util=60,
                    )
                ]
            }
        )
    for f in frames:
        for g in f["gpus"]:
            g.pop("sm_active", None)
            g.pop("tensor_active", None)
    return {
        "name": "leak",
        "interval_s": 60,
        "host": "fake-leak",
        "gpus": [{**_A100, "uuid": "GPU-00000000-leak-0000-0000-000000000000"}],
        "frames": frames,
    }


def _scenario_thermal() -> dict[str, Any]:
    """1 × H100 heating up under load until it throttles (HW + SW thermal slowdown, clocks drop)."""
    p = _proc(31337, 70000, "dave", "torchrun train.py", "dave/train")
    frames: list[dict[str, Any]] = [
        {"gpus": [_busy(71000, p, temperature_c=70 + 2 * k)]} for k in range(8)
    ]
    frames += [
        {
            "repeat": 10,
            "gpus": [
                _busy(
                    71000,
                    p,
                    temperature_c=92,
                    throttle=0x20 | 0x40,
                    sm_clock_mhz=1200,
                    power_w=480,
                    util=99,
                    sm_active=0.4,
                )
            ],
        }
    ]
    return {
        "name": "thermal",
        "interval_s": 60,
        "host": "fake-thermal",
        "gpus": [{**_H100, "uuid": "GPU-00000000-hot0-0000-0000-000000000000"}],
        "frames": frames,
    }


def _scenario_xid() -> dict[str, Any]:
    """2 × H100: GPU 1 reports XID 79 (fell off the bus), then NVML says GpuIsLost on it."""
    p0 = _proc(1000, 50000, "erin", "python train.py --rank 0", "erin/train")
    p1 = _proc(1001, 50000, "erin", "python train.py --rank 1", "erin/train")
    return {
        "name": "xid",
        "interval_s": 60,
        "host": "fake-xid",
        "gpus": [
            {**_H100, "uuid": "GPU-00000000-xid0-0000-0000-000000000000"},
            {**_H100, "uuid": "GPU-00000001-xid1-0000-0000-000000000001"},
        ],
        "frames": [
            {"repeat": 3, "gpus": [_busy(51000, p0), _busy(51000, p1)]},
            {
                "gpus": [
                    _busy(51000, p0),
                    _busy(
                        51000,
                        p1,
                        xid=[79],
                        pcie_replay=12,
                        nvlink_errors={"crc_flit": 3, "replay": 1},
                    ),
                ]
            },
            {"repeat": 6, "gpus": [_idle(51000, [p0]), {"lost": True}]},
        ],
    }


def _scenario_mig() -> dict[str, Any]:
    """2 GPUs in MIG mode. GPU 0, an A100-80GB, has three 1g.10gb instances: two serve a process
    (instance 0 at 91 % of its memory), one is empty, and 4 of the 7 slices are not allocated; the
    A100 has no GPM, so an instance counts as active while a process runs in it. GPU 1, an H100,
    has two 3g.40gb instances read through GPM: one trains (SM-active 55 %), one holds an idle
    notebook (1 %); 1 slice is unallocated. Whole-GPU utilization is not supported in MIG mode.
    Known answer: GPU 0 is 2/7 active, GPU 1 3/7 active; the rest is waste."""
    a100 = {
        **_A100,
        "uuid": "GPU-00000000-mig0-0000-0000-000000000000",
        "mig": [
            {
                "uuid": f"MIG-0000000{k}-mig0-0000-0000-000000000000",
                "memory_total_mib": 9856,
                "gpu_instance_id": 7 + k,
            }
            for k in range(3)
        ],
    }
    h100 = {
        **_H100,
        "uuid": "GPU-00000001-mig1-0000-0000-000000000001",
        "mig": [
            {
                "uuid": f"MIG-0000000{k}-mig1-0000-0000-000000000001",
                "memory_total_mib": 40192,
                "slices": 3,
                "gpu_instance_id": 1 + k,
            }
            for k in range(2)
        ],
    }
    return {
        "name": "mig",
        "interval_s": 60,
        "host": "fake-mig",
        "gpus": [a100, h100],
        "frames": [
            {
                "repeat": 5,
                "gpus": [
                    {
                        "memory_used_mib": 15000,
                        "mig_used_mib": [9000, 6000, 0],
                        "power_w": 180,
                        "temperature_c": 45,
                        "processes": [
                            {
                                **_proc(
                                    2001, 9000, "frank", "python serve.py --mig 0", "frank/serve"
                                ),
                                "mig": 0,
                            },
                            {
                                **_proc(
                                    2002, 6000, "grace", "python eval.py --mig 1", "grace/eval"
                                ),
                                "mig": 1,
                            },
                        ],
                    },
                    {
                        "memory_used_mib": 42000,
                        "mig_used_mib": [30000, 12000],
                        "mig_sm_active": [0.55, 0.01],
                        "power_w": 420,
                        "temperature_c": 58,
                        "processes": [
                            {
                                **_proc(3001, 30000, "heidi", "torchrun train.py", "heidi/train"),
                                "mig": 0,
                            },
                            {
                                **_proc(
                                    3002, 12000, "ivan", "python -m jupyter lab", "ivan/notebook"
                                ),
                                "mig": 1,
                            },
                        ],
                    },
                ],
            }
        ],
    }


SCENARIOS: dict[str, Any] = {
    "idle": _scenario_idle,
    "leak": _scenario_leak,
    "thermal": _scenario_thermal,
    "xid": _scenario_xid,
    "mig": _scenario_mig,
}
"""Built-in scenarios by name; each function's docstring says what it shows."""


def scenario(name: str) -> Trace:
    """A built-in scenario as a :class:`Trace`."""
    fn = SCENARIOS.get(name)
    if fn is None:
        raise InputError(
            f"unknown fake scenario {name!r}",
            hint=f"use one of {', '.join(SCENARIOS)} or a trace file",
            suggestions=did_you_mean(name, SCENARIOS),
        )
    return parse_trace(fn(), f"scenario:{name}")


def resolve_fake(spec: str, **kwargs: Any) -> FakeGpuReader:
    """``--fake SCENARIO|TRACE``: a scenario name, or a path to a trace file."""
    if spec in SCENARIOS:
        return FakeGpuReader.from_scenario(spec, **kwargs)
    if Path(spec).suffix in (".json", ".yaml", ".yml") or Path(spec).exists():
        return FakeGpuReader.from_trace(spec, **kwargs)
    return FakeGpuReader.from_scenario(spec, **kwargs)  # raises with did-you-mean
