"""Fake GPU traces: the file format, its parser and checks (the fake NVML replays them).

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

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuwise.base.validate import finite_number, ratio, whole_number
from gpuwise.errors import DataFileError, InputError, did_you_mean, parse_error_text

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
_PROCESS_TEXT_KEYS = (
    "user",
    "command",
    "workload",
    "container_id",
    "pod_uid",
    "namespace",
    "pod",
    "container",
    "plan_id",
)
_PROCESS_KEYS = {
    "pid",
    "memory_mib",
    *_PROCESS_TEXT_KEYS,
    "mig",
    "sm_util",
    "start",
}
_NVLINK_ERROR_KINDS = {"crc_flit": 38, "replay": 52, "recovery": 59}
MAX_FRAMES = 10_000_000
"""Most frames a trace may expand to (the sum of its ``repeat``s): a year of 3-second frames."""


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


_FIX = "fix that value in the trace file"


def _check_frame_gpu(g: Mapping[str, Any], where: str, mig_count: int) -> None:
    """Every field of one GPU in one frame has the type and range the fake serves."""
    for key, value in g.items():
        w = f"{where}.{key}"
        if value is None and key in _RATIO_KEYS:
            continue  # "not read this frame"
        if key in _NUMBER_KEYS:
            finite_number(value, w, hint=_FIX)
        elif key in _PERCENT_KEYS:
            ratio(value, w, top=100, hint=_FIX)
        elif key in _RATIO_KEYS:
            ratio(value, w, hint=_FIX)
        elif key in _COUNT_KEYS:
            whole_number(value, w, hint=_FIX)
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
                whole_number(code, f"{w}[{n}]", minimum=1, hint=_FIX)
        elif key in ("mig_used_mib", "mig_sm_active"):
            if not isinstance(value, list) or len(value) > mig_count:
                raise DataFileError(
                    f"{w}: expected a list of at most {mig_count} values (one per MIG instance), "
                    f"got {value!r}",
                    hint="fix that value in the trace file",
                )
            for n, x in enumerate(value):
                finite_number(x, f"{w}[{n}]", hint=_FIX) if key == "mig_used_mib" else ratio(
                    x, f"{w}[{n}]", hint=_FIX
                )
        elif key == "nvlink_errors":
            if not isinstance(value, Mapping) or not set(value) <= _NVLINK_ERROR_KINDS.keys():
                raise DataFileError(
                    f"{w}: expected a mapping of {', '.join(_NVLINK_ERROR_KINDS)} to counts, got "
                    f"{value!r}",
                    hint="fix that value in the trace file",
                )
            for kind, n in value.items():
                whole_number(n, f"{w}.{kind}", hint=_FIX)
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
                whole_number(proc["pid"], f"{pw}.pid", minimum=1, hint=_FIX)
                if "memory_mib" in proc:
                    finite_number(proc["memory_mib"], f"{pw}.memory_mib", hint=_FIX)
                if "sm_util" in proc:
                    ratio(proc["sm_util"], f"{pw}.sm_util", top=100, hint=_FIX)
                if "start" in proc:
                    whole_number(proc["start"], f"{pw}.start", hint=_FIX)
                if "mig" in proc and (
                    whole_number(proc["mig"], f"{pw}.mig", hint=_FIX) >= mig_count
                ):
                    raise DataFileError(
                        f"{pw}.mig: instance {proc['mig']} does not exist (the GPU declares "
                        f"{mig_count} MIG instances)",
                        hint="fix that process",
                    )
                for text in _PROCESS_TEXT_KEYS:
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
        finite_number(
            g.get("memory_total_mib", 81559),
            f"{origin}: gpus[{k}].memory_total_mib",
            minimum=1,
            hint=_FIX,
        )
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
            whole_number(
                m.get("slices", 1), f"{origin}: gpus[{k}].mig[{n}].slices", minimum=1, hint=_FIX
            )
            finite_number(
                m.get("memory_total_mib", 9856),
                f"{origin}: gpus[{k}].mig[{n}].memory_total_mib",
                minimum=1,
                hint=_FIX,
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
        repeat = whole_number(frame.get("repeat", 1), f"{where}.repeat", minimum=1, hint=_FIX)
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
    interval = finite_number(
        data.get("interval_s", 1.0), f"{origin}: interval_s", minimum=1e-3, hint=_FIX
    )
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
            hint="give an existing trace file or a scenario name (idle, leak, thermal, xid, mig)",
        ) from exc
    import yaml

    try:
        data = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, RecursionError, yaml.YAMLError) as exc:  # JSONDecodeError is a ValueError
        raise DataFileError(
            f"{p} is not valid JSON/YAML ({parse_error_text(exc)})", hint="fix the trace file"
        ) from exc
    return parse_trace(data, str(p))
