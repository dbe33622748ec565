"""Measured figures that replace the estimator's defaults: ``calibration.json``.

``gpuwise bench --calibrate`` writes the file to ``<config dir>/calibration.json``; this module
reads it. The schema (version 1, documented with examples in ``docs/calibration.md``)::

    {
      "version": 1,
      "measured_at": "2026-11-21T06:00:00Z",        # ISO 8601, optional
      "device": "NVIDIA H100 80GB HBM3",             # free text, optional
      "gpus": {
        "H100": {                                    # any name gpuwise.hardware.find_gpu knows
          "matmul_efficiency": {"bf16": 0.78, "fp8": 0.62},   # achieved / datasheet dense peak
          "memory_bandwidth_efficiency": 0.88,        # achieved / datasheet HBM bandwidth
          "mfu": 0.45,                                # measured training MFU (any model)
          "mfu_by_model": {"llama-2-7b": 0.48},       # per preset name, wins over "mfu"
          "cuda_context_gib": 0.55,                   # memory in use before the first tensor
          "total_memory_gib": 79.65,                  # device memory the driver reports (measured)
          "allocator_fraction": 0.04                  # reserved/allocated - 1 at peak
        }
      },
      "workload": {                                  # your stack's defaults, optional
        "fused_kernels": "on",                       # any option of `gpuwise estimate`,
        "attention_kernel": "flash3",                # named with _ for -; a flag typed on
        "master_weights": "bf16"                     # the command line wins
      }
    }

Every per-GPU key is optional. Fractions must lie in (0, 1] (an MFU in (0, 1)); measured
``matmul_tflops`` and ``memory_bandwidth_tb_s`` may not exceed the GPU's datasheet figure by more than
5% (boost clocks); an unknown key is an error so a typo does not silently fall back to a default.
A file that breaks these rules is refused with one line naming the key and the fix.

This module owns the schema: it defines it, validates it, and writes it
(:func:`write_gpu_entry`, atomic). ``gpuwise bench --calibrate`` only hands it measured values.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuwise.base.paths import config_dir, write_text_atomic
from gpuwise.base.validate import finite_number
from gpuwise.errors import DataFileError, did_you_mean, parse_error_text

CALIBRATION_VERSION = 1
# A measured peak may exceed the datasheet by a few percent (boost clocks above the rated clock);
# more than this means the figure belongs to another GPU or the run was broken.
DATASHEET_TOLERANCE = 1.05
_GPU_KEYS = {
    "matmul_efficiency",
    "memory_bandwidth_efficiency",
    "mfu",
    "mfu_by_model",
    "cuda_context_gib",
    "total_memory_gib",
    "allocator_fraction",
    "matmul_tflops",
    "memory_bandwidth_tb_s",
    "notes",
}


@dataclass(frozen=True)
class GpuCalibration:
    """Measured figures for one GPU model; None = not measured (the default applies)."""

    gpu: str
    """Canonical GPU name (``gpuwise.hardware``)."""
    matmul_efficiency: dict[str, float] = field(default_factory=dict)
    """Achieved fraction of the dense datasheet peak per precision (large GEMMs)."""
    memory_bandwidth_efficiency: float | None = None
    """Achieved fraction of the datasheet memory bandwidth (large copies)."""
    mfu: float | None = None
    """Measured model-FLOPs utilisation of a training step."""
    mfu_by_model: dict[str, float] = field(default_factory=dict)
    """Measured MFU per model preset name; wins over ``mfu``."""
    cuda_context_gib: float | None = None
    """Device memory in use before the first tensor (CUDA context, cuBLAS workspace)."""
    allocator_fraction: float | None = None
    """Caching-allocator overhead at peak: reserved / allocated - 1."""
    total_memory_gib: float | None = None
    """Device memory the driver reports on the measured GPU (``torch.cuda.mem_get_info`` total,
    nvidia-smi ``memory.total``); wins over the published figure in the GPU table."""


@dataclass(frozen=True)
class Calibration:
    """A parsed calibration file."""

    path: str
    """Where it was read from."""
    gpus: dict[str, GpuCalibration]
    """Per canonical GPU name."""
    measured_at: str | None = None
    """When ``gpuwise bench`` measured it (ISO 8601)."""
    device: str | None = None
    """The device name the measurement ran on."""
    workload: dict[str, str | bool] = field(default_factory=dict)
    """Defaults for workload options (``gpuwise.estimate.options``) that describe your stack;
    options given on the command line or to the library win."""

    def for_gpu(self, name: str) -> GpuCalibration | None:
        return self.gpus.get(name)


def _fraction(value: Any, where: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not 0 < value <= 1
    ):
        raise DataFileError(
            f"{where} must be a number in (0, 1], got {value!r}",
            hint="rerun `gpuwise bench --calibrate` or fix the value",
        )
    return float(value)


def _mfu(value: Any, where: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not 0 < value < 1
    ):
        raise DataFileError(
            f"{where} must be a model-FLOPs utilisation in (0, 1), got {value!r}",
            hint="rerun `gpuwise bench --calibrate` on that GPU or fix the value",
        )
    return float(value)


def _below_datasheet(value: Any, peak: float | None, where: str, unit: str) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        raise DataFileError(
            f"{where} must be a positive number of {unit}, got {value!r}",
            hint="rerun `gpuwise bench --calibrate` or remove the key",
        )
    if peak is not None and value > peak * DATASHEET_TOLERANCE:
        raise DataFileError(
            f"{where} = {value:g} {unit} is above the datasheet peak ({peak:g} {unit})",
            hint="the figure belongs to another GPU or a broken run: rerun `gpuwise bench "
            "--calibrate` on this GPU, or remove the entry",
        )


def _non_negative(value: Any, where: str) -> float:
    return finite_number(value, where, hint="rerun `gpuwise bench --calibrate` or fix the value")


def parse_calibration(data: Any, where: str) -> Calibration:
    """Check and convert a loaded calibration document; errors name file and key."""
    from gpuwise.hardware import gpu_table

    if not isinstance(data, dict):
        raise DataFileError(
            f"{where}: expected a JSON object", hint="see docs/calibration.md for the schema"
        )
    version = data.get("version")
    if version != CALIBRATION_VERSION:
        raise DataFileError(
            f"{where}: unsupported calibration version {version!r}",
            hint=f"this gpuwise reads version {CALIBRATION_VERSION}; rerun `gpuwise bench --calibrate`",
        )
    gpus_raw = data.get("gpus", {})
    if not isinstance(gpus_raw, dict):
        raise DataFileError(
            f"{where}: 'gpus' must be an object keyed by GPU name", hint="see docs/calibration.md"
        )
    table = gpu_table()
    gpus: dict[str, GpuCalibration] = {}
    for name, entry in gpus_raw.items():
        at = f"{where}: gpus.{name}"
        spec = table.get(str(name))
        if spec is None:
            raise DataFileError(
                f"{at}: unknown GPU {name!r}",
                hint="use a name `gpuwise gpus` lists",
                suggestions=did_you_mean(str(name), table.names),
            )
        if not isinstance(entry, dict):
            raise DataFileError(f"{at}: expected an object", hint="see docs/calibration.md")
        unknown = set(entry) - _GPU_KEYS
        if unknown:
            raise DataFileError(
                f"{at}: unknown key(s) {', '.join(sorted(unknown))}",
                hint="see docs/calibration.md",
                suggestions=[s for u in unknown for s in did_you_mean(u, _GPU_KEYS, 1)],
            )
        eff = entry.get("matmul_efficiency", {})
        if not isinstance(eff, dict):
            raise DataFileError(
                f"{at}.matmul_efficiency: expected an object keyed by precision",
                hint='e.g. {"bf16": 0.78}',
            )
        by_model = entry.get("mfu_by_model", {})
        if not isinstance(by_model, dict):
            raise DataFileError(
                f"{at}.mfu_by_model: expected an object keyed by model name",
                hint='e.g. {"llama-2-7b": 0.48}',
            )
        tflops = entry.get("matmul_tflops", {})
        if not isinstance(tflops, dict):
            raise DataFileError(
                f"{at}.matmul_tflops: expected an object keyed by precision",
                hint='e.g. {"bf16": 790.0}',
            )
        for prec, value in tflops.items():
            peak = (
                spec.peak_tflops(str(prec))
                if str(prec) in ("fp32", "tf32", "fp16", "bf16", "fp8", "int8")
                else None
            )
            _below_datasheet(value, peak, f"{at}.matmul_tflops.{prec}", "TFLOP/s")
        if entry.get("memory_bandwidth_tb_s") is not None:
            _below_datasheet(
                entry["memory_bandwidth_tb_s"],
                spec.memory_bandwidth_tb_s,
                f"{at}.memory_bandwidth_tb_s",
                "TB/s",
            )
        gpus[spec.name] = GpuCalibration(
            gpu=spec.name,
            matmul_efficiency={
                str(k): _fraction(v, f"{at}.matmul_efficiency.{k}") for k, v in eff.items()
            },
            memory_bandwidth_efficiency=_fraction(
                entry["memory_bandwidth_efficiency"], f"{at}.memory_bandwidth_efficiency"
            )
            if entry.get("memory_bandwidth_efficiency") is not None
            else None,
            mfu=_mfu(entry["mfu"], f"{at}.mfu") if "mfu" in entry else None,
            mfu_by_model={
                str(k).lower(): _mfu(v, f"{at}.mfu_by_model.{k}") for k, v in by_model.items()
            },
            cuda_context_gib=_non_negative(entry["cuda_context_gib"], f"{at}.cuda_context_gib")
            if entry.get("cuda_context_gib") is not None
            else None,
            allocator_fraction=_non_negative(
                entry["allocator_fraction"], f"{at}.allocator_fraction"
            )
            if entry.get("allocator_fraction") is not None
            else None,
            total_memory_gib=_non_negative(entry["total_memory_gib"], f"{at}.total_memory_gib")
            if entry.get("total_memory_gib") is not None
            else None,
        )
    return Calibration(
        path=where,
        gpus=gpus,
        measured_at=data.get("measured_at"),
        device=data.get("device"),
        workload=_workload_section(data.get("workload", {}), f"{where}: workload"),
    )


def _workload_section(raw: Any, where: str) -> dict[str, str | bool]:
    """The ``workload`` object: option name → value (text, number or true/false); names checked
    against the options table so a typo does not silently fall back to a default."""
    from gpuwise.estimate.options import OPTIONS, check_option_names, workload_defaults

    if not isinstance(raw, dict):
        raise DataFileError(
            f"{where}: expected an object of option name → value",
            hint='e.g. "workload": {"fused_kernels": "on"}',
        )
    check_option_names(raw, where, tuple(OPTIONS[n] for n in workload_defaults()))
    out: dict[str, str | bool] = {}
    for name, value in raw.items():
        if OPTIONS[name].kind == "switch":
            if not isinstance(value, bool):
                raise DataFileError(
                    f"{where}.{name}: expected true or false, got {value!r}",
                    hint="use true or false",
                )
            out[name] = value
        elif isinstance(value, (str, int, float)) and not isinstance(value, bool):
            out[name] = str(value)
        else:
            raise DataFileError(
                f"{where}.{name}: expected text or a number, got {value!r}",
                hint='write it as on the command line, e.g. "on", "flash2" or 8',
            )
    return out


def default_calibration_path() -> Path:
    return config_dir() / "calibration.json"


def load_calibration(path: str | Path | None = None) -> Calibration | None:
    """The calibration at ``path`` (default ``<config dir>/calibration.json``), or None if absent.

    A file that exists but is malformed raises DataFileError naming the file and key.
    """
    p = Path(path) if path is not None else default_calibration_path()
    if not p.is_file():
        if path is not None and p.is_dir():
            raise DataFileError(
                f"{p} is a folder, not a calibration file",
                hint=f"give the file `gpuwise bench --calibrate` wrote, e.g. {p / 'calibration.json'}",
            )
        if path is not None:
            raise DataFileError(
                f"{p}: no such calibration file", hint="run `gpuwise bench --calibrate` first"
            )
        return None
    try:
        data = json.loads(p.read_text("utf-8-sig"))
    except UnicodeDecodeError as exc:  # was reported as a permissions problem
        raise DataFileError(
            f"{p}: {parse_error_text(exc)}",
            hint="rerun `gpuwise bench --calibrate`, or remove the file",
        ) from None
    except OSError as exc:
        raise DataFileError(
            f"{p}: cannot read ({exc.strerror})", hint="check the file's permissions"
        ) from None
    except json.JSONDecodeError as exc:
        raise DataFileError(
            f"{p}: not valid JSON (line {exc.lineno}: {exc.msg})",
            hint="rerun `gpuwise bench --calibrate` or fix the file",
        ) from None
    return parse_calibration(data, str(p))


def _existing(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataFileError(
            f"{path}: existing calibration file is not readable JSON ({exc})",
            hint=f"move it aside (`mv {path} {path}.bak`) and rerun",
        ) from None
    if (
        not isinstance(data, dict)
        or data.get("version") != CALIBRATION_VERSION
        or not isinstance(data.get("gpus", {}), dict)
    ):
        raise DataFileError(
            f"{path}: existing calibration file is not version {CALIBRATION_VERSION}",
            hint=f"move it aside (`mv {path} {path}.bak`) and rerun",
        )
    return data


def write_gpu_entry(
    gpu: str, entry: dict[str, Any], *, device: str, measured_at: str, path: Path | None = None
) -> Path:
    """Merge ``entry`` (the keys of one GPU) into the calibration file, atomically.

    Keys of other GPUs, and keys of this GPU that ``entry`` does not carry, are kept. The merged
    document is validated before anything is written: an implausible value (see the module
    docstring) raises DataFileError and leaves the file as it was.
    """
    target = path or default_calibration_path()
    data = _existing(target)
    gpus = dict(data.get("gpus", {}))
    merged = dict(gpus.get(gpu, {}))
    merged.update(entry)
    gpus[gpu] = merged
    doc = {
        "version": CALIBRATION_VERSION,
        "measured_at": measured_at,
        "device": device,
        "gpus": gpus,
    }
    parse_calibration(doc, str(target))
    target.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(target, json.dumps(doc, indent=2) + "\n")
    return target
