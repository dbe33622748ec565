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
          "allocator_fraction": 0.04,                 # reserved/allocated - 1 at peak
          "from_runs": [                              # `gpuwise calibrate --from-runs`
            {"model": "llama-3.1-8b", "task": "lora", "mfu": 0.41, "memory_ratio": 1.06,
             "runs": ["job-a/0"], "tokens_per_s_per_gpu": 3120.0, "world_size": 8}
          ]
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
(:func:`write_gpu_entry`, :func:`write_run_entries`, atomic). ``gpuwise bench --calibrate`` and
``gpuwise calibrate --from-runs`` only hand it measured values.
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
    "from_runs",
}
_RUN_KEYS = {
    "model",
    "task",
    "mfu",
    "memory_ratio",
    "runs",
    "tokens_per_s_per_gpu",
    "step_s",
    "peak_memory_gib",
    "world_size",
    "measured_at",
    "rehearsal",
}


@dataclass(frozen=True)
class MeasuredWorkload:
    """What real runs of one model and task measured on one GPU (``calibrate --from-runs``)."""

    model: str
    """The model's name as the plan named it (a preset or a config's name), lower case."""
    task: str
    """pretrain, finetune, lora or qlora: the MFU of a LoRA step is not a full step's."""
    runs: tuple[str, ...]
    """The attempts the figures rest on, ``<run id>/<attempt>``."""
    mfu: float | None = None
    """The MFU that reproduces the measured throughput through the step-time model (median over
    the runs); the estimator's communication model still applies at other GPU counts."""
    memory_ratio: float | None = None
    """Measured peak memory per GPU ÷ the estimator's peak for the same recipe (median over the
    runs); the estimate's memory is scaled by it (a ``measured_allowance`` line in the breakdown)."""
    tokens_per_s_per_gpu: float | None = None
    """Median measured training tokens per second per GPU (for people; the MFU is what is used)."""
    step_s: float | None = None
    """Median measured seconds per optimizer step (for people)."""
    peak_memory_gib: float | None = None
    """Largest measured peak memory per GPU, GiB (for people)."""
    world_size: int | None = None
    """GPUs of the measured runs (the largest when they differ; for people)."""
    measured_at: str | None = None
    """When the latest of the runs ended, ISO 8601."""
    rehearsal: bool = False
    """True when runs without a GPU were taken as this GPU's (``calibrate --assume-gpu``, a CPU
    rehearsal of the loop): the figures are not a measurement of this GPU."""


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
    from_runs: tuple[MeasuredWorkload, ...] = ()
    """Figures measured by real runs, per model and task (``gpuwise calibrate --from-runs``);
    the entry for the estimated model and task wins over ``mfu_by_model`` and ``mfu``."""

    def measured_for(self, model: str, task: str) -> MeasuredWorkload | None:
        """The runs' figures for ``model`` doing ``task``, or None."""
        key = (model.lower(), task)
        return next((m for m in self.from_runs if (m.model, m.task) == key), None)


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

    @property
    def runs(self) -> tuple[str, ...]:
        """Every run attempt the file's figures rest on (``calibrate --from-runs``), sorted."""
        return tuple(sorted({r for g in self.gpus.values() for m in g.from_runs for r in m.runs}))


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
            from_runs=_from_runs(entry.get("from_runs", []), f"{at}.from_runs"),
        )
    return Calibration(
        path=where,
        gpus=gpus,
        measured_at=data.get("measured_at"),
        device=data.get("device"),
        workload=_workload_section(data.get("workload", {}), f"{where}: workload"),
    )


def _from_runs(raw: Any, where: str) -> tuple[MeasuredWorkload, ...]:
    """The ``from_runs`` list: one entry per model and task, each naming the runs behind it."""
    fix = "rerun `gpuwise calibrate --from-runs DIR` or remove the entry"
    if not isinstance(raw, list):
        raise DataFileError(f"{where}: expected a list of measured workloads", hint=fix)
    out: list[MeasuredWorkload] = []
    for i, item in enumerate(raw):
        at = f"{where}[{i}]"
        if not isinstance(item, dict):
            raise DataFileError(f"{at}: expected an object", hint=fix)
        unknown = set(item) - _RUN_KEYS
        if unknown:
            raise DataFileError(
                f"{at}: unknown key(s) {', '.join(sorted(unknown))}",
                hint="see docs/calibration.md",
                suggestions=[s for u in unknown for s in did_you_mean(u, _RUN_KEYS, 1)],
            )
        for name in ("model", "task"):
            if not isinstance(item.get(name), str) or not item[name]:
                raise DataFileError(
                    f"{at}.{name}: expected a name, got {item.get(name)!r}", hint=fix
                )
        runs = item.get("runs")
        if not isinstance(runs, list) or not runs or not all(isinstance(r, str) for r in runs):
            raise DataFileError(
                f"{at}.runs: expected a non-empty list of run ids, got {runs!r}", hint=fix
            )
        num = {
            k: finite_number(item[k], f"{at}.{k}", positive=True, hint=fix)
            for k in ("memory_ratio", "tokens_per_s_per_gpu", "step_s", "peak_memory_gib")
            if item.get(k) is not None
        }
        size = item.get("world_size")
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
            raise DataFileError(f"{at}.world_size: expected a whole number ≥ 1", hint=fix)
        rehearsal = item.get("rehearsal", False)
        if not isinstance(rehearsal, bool):
            raise DataFileError(f"{at}.rehearsal: expected true or false", hint=fix)
        key = (item["model"].lower(), item["task"])
        if any((m.model, m.task) == key for m in out):
            raise DataFileError(f"{at}: a second entry for {key[0]} {key[1]}", hint=fix)
        out.append(
            MeasuredWorkload(
                model=key[0],
                task=key[1],
                runs=tuple(runs),
                mfu=_mfu(item["mfu"], f"{at}.mfu") if item.get("mfu") is not None else None,
                world_size=size,
                rehearsal=rehearsal,
                measured_at=item.get("measured_at")
                if isinstance(item.get("measured_at"), str)
                else None,
                **num,
            )
        )
    return tuple(out)


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
    doc = {  # the other sections (workload) are kept
        **data,
        "version": CALIBRATION_VERSION,
        "measured_at": measured_at,
        "device": device,
        "gpus": gpus,
    }
    parse_calibration(doc, str(target))
    target.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(target, json.dumps(doc, indent=2) + "\n")
    return target


def write_run_entries(
    entries: dict[str, list[dict[str, Any]]], *, measured_at: str, path: Path | None = None
) -> Path:
    """Merge measured workloads (GPU → ``from_runs`` entries) into the calibration file, atomically.

    An entry replaces the GPU's entry for the same model and task; other entries, other keys and
    other GPUs are kept. The merged document is validated before anything is written.
    """
    target = path or default_calibration_path()
    data = _existing(target)
    gpus = dict(data.get("gpus", {}))
    for gpu, new in entries.items():
        merged = dict(gpus.get(gpu, {}))
        keys = {(str(e["model"]).lower(), e["task"]) for e in new}
        kept = [
            e
            for e in merged.get("from_runs", [])
            if not isinstance(e, dict) or (str(e.get("model")).lower(), e.get("task")) not in keys
        ]
        merged["from_runs"] = kept + new
        gpus[gpu] = merged
    doc = {**data, "version": CALIBRATION_VERSION, "measured_at": measured_at, "gpus": gpus}
    parse_calibration(doc, str(target))
    target.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(target, json.dumps(doc, indent=2) + "\n")
    return target
