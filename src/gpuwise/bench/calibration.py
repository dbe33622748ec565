"""Write measured efficiencies into ``<config dir>/calibration.json`` for ``gpuwise estimate``
and ``gpuwise plan`` to use in place of their defaults.

The schema (version 1) is owned by the reader, :mod:`gpuwise.estimate.calibration`, and
documented in ``docs/calibration.md``; this module writes exactly that: per GPU model,
``matmul_efficiency`` (achieved ÷ dense datasheet peak, per precision),
``memory_bandwidth_efficiency``, ``mfu`` (the GPT-style run's model-FLOPs utilisation),
``cuda_context_gib`` and the raw ``matmul_tflops`` / ``memory_bandwidth_tb_s``. Other GPUs'
entries, and keys this run did not measure, are kept. The write is atomic (temporary file,
fsync, rename), so a reader never sees half a file.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from gpuwise.bench.result import BenchReport
from gpuwise.errors import DataFileError, InputError
from gpuwise.paths import config_dir, write_text_atomic

CALIBRATION_VERSION = 1


def _fraction(value: float | None) -> float | None:
    """Ratios go into (0, 1]: a measurement above the datasheet (boost clocks) counts as 1."""
    if value is None or not value > 0:
        return None
    return float(f"{min(value, 1.0):.4g}")  # 4 significant digits: tiny CPU ratios must stay > 0


def calibration_entry(report: BenchReport) -> dict[str, Any]:
    """The per-GPU calibration object for ``report`` (only what was measured)."""
    entry: dict[str, Any] = {}
    eff = {r.name.split(".", 1)[1]: f for r in report.results
           if r.name.startswith("matmul.") and (f := _fraction(r.ratio)) is not None}
    if eff:
        entry["matmul_efficiency"] = eff
        entry["matmul_tflops"] = {r.name.split(".", 1)[1]: round(r.value, 3) for r in report.results
                                  if r.name.startswith("matmul.")}
    copy = report.get("memory.copy")
    if copy is not None and (f := _fraction(copy.ratio)) is not None:
        entry["memory_bandwidth_efficiency"] = f
        entry["memory_bandwidth_tb_s"] = round(copy.value / 1000, 4)
    gpt = report.get("train.gpt.amp") or report.get("train.gpt.fp32")
    if gpt is not None and (f := _fraction(gpt.ratio)) is not None:
        entry["mfu"] = f
    if "cuda_context_gib" in report.extras:
        entry["cuda_context_gib"] = round(report.extras["cuda_context_gib"], 3)
    mode = "quick" if report.quick else "full"
    entry["notes"] = (f"gpuwise bench ({mode}) on {report.device.name} ({report.device.kind}), "
                      f"torch {report.device.torch_version}")
    return entry


def default_path() -> Path:
    return config_dir() / "calibration.json"


def _existing(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataFileError(f"{path}: existing calibration file is not readable JSON ({exc})",
                            hint=f"move it aside (`mv {path} {path}.bak`) and rerun") from None
    if not isinstance(data, dict) or data.get("version") != CALIBRATION_VERSION or not isinstance(data.get("gpus", {}), dict):
        raise DataFileError(f"{path}: existing calibration file is not version {CALIBRATION_VERSION}",
                            hint=f"move it aside (`mv {path} {path}.bak`) and rerun")
    return data


def write_calibration(report: BenchReport, path: Path | None = None) -> Path:
    """Merge ``report``'s efficiencies into the calibration file (atomically); returns its path."""
    if report.device.gpu is None:
        raise InputError("nothing to calibrate: the benchmarks ran without a GPU model to compare with",
                         hint="run on a GPU, or name the model the figures are for with --gpu NAME")
    entry = calibration_entry(report)
    measured = set(entry) - {"notes"}
    if not measured:
        raise InputError("nothing to calibrate: no measured figure has a datasheet peak to compare with",
                         hint="include the matmul, memory or train groups (drop --only)")
    target = path or default_path()
    data = _existing(target)
    gpus = dict(data.get("gpus", {}))
    merged = dict(gpus.get(report.device.gpu, {}))
    merged.update(entry)
    gpus[report.device.gpu] = merged
    doc = {"version": CALIBRATION_VERSION,
           "measured_at": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "device": report.device.name, "gpus": gpus}
    target.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(target, json.dumps(doc, indent=2) + "\n")
    return target
