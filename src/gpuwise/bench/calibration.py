"""Write measured efficiencies into ``<config dir>/calibration.json`` for ``gpuwise estimate``
and ``gpuwise plan`` to use in place of their defaults.

The schema (version 1) is owned by :mod:`gpuwise.estimate.calibration`, which defines, validates
and writes it (``docs/calibration.md``); this module only hands it the values: per GPU model,
``matmul_efficiency`` (achieved ÷ dense datasheet peak, per precision),
``memory_bandwidth_efficiency``, ``mfu`` (the GPT-style run's model-FLOPs utilisation),
``cuda_context_gib`` and the raw ``matmul_tflops`` / ``memory_bandwidth_tb_s``. Other GPUs'
entries, and keys this run did not measure, are kept. Calibration is written only from a full
(not ``--quick``) run on the GPU it names.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from gpuwise.bench.result import BenchReport
from gpuwise.errors import InputError
from gpuwise.estimate.calibration import (
    CALIBRATION_VERSION,
    default_calibration_path,
    write_gpu_entry,
)

__all__ = ["CALIBRATION_VERSION", "calibration_entry", "default_path", "write_calibration"]


def _fraction(value: float | None) -> float | None:
    """Ratios go into (0, 1]: a measurement above the datasheet (boost clocks) counts as 1."""
    if value is None or not value > 0:
        return None
    return float(f"{min(value, 1.0):.4g}")  # 4 significant digits: tiny CPU ratios must stay > 0


def calibration_entry(report: BenchReport) -> dict[str, Any]:
    """The per-GPU calibration object for ``report`` (only what was measured)."""
    entry: dict[str, Any] = {}
    eff = {
        r.name.split(".", 1)[1]: f
        for r in report.results
        if r.name.startswith("matmul.") and (f := _fraction(r.ratio)) is not None
    }
    if eff:
        entry["matmul_efficiency"] = eff
        entry["matmul_tflops"] = {
            r.name.split(".", 1)[1]: round(r.value, 3)
            for r in report.results
            if r.name.startswith("matmul.")
        }
    copy = report.get("memory.copy")
    if copy is not None and (f := _fraction(copy.ratio)) is not None:
        entry["memory_bandwidth_efficiency"] = f
        entry["memory_bandwidth_tb_s"] = round(copy.value / 1000, 4)
    gpt = report.get("train.gpt.amp") or report.get("train.gpt.fp32")
    if gpt is not None and (f := _fraction(gpt.ratio)) is not None:
        entry["mfu"] = f
    if "cuda_context_gib" in report.extras:
        entry["cuda_context_gib"] = round(report.extras["cuda_context_gib"], 3)
    if "total_memory_gib" in report.extras:
        entry["total_memory_gib"] = round(report.extras["total_memory_gib"], 3)
    mode = "quick" if report.quick else "full"
    entry["notes"] = (
        f"gpuwise bench ({mode}) on {report.device.name} ({report.device.kind}), "
        f"torch {report.device.torch_version}"
    )
    return entry


def default_path() -> Path:
    return default_calibration_path()


def check_calibration_run(quick: bool, device: str | None) -> None:
    """Refuse ``bench --calibrate`` at once, before minutes of benchmarks, where it could not be
    written: ``--quick``, ``--device cpu``, or a machine where torch sees no GPU."""
    if quick:
        raise InputError(
            "calibration is never written from `bench --quick` (small sizes check the code path, "
            "not the hardware)",
            hint="rerun `gpuwise bench --calibrate` without --quick",
        )
    if device == "cpu":
        raise InputError(
            "`bench --calibrate --device cpu`: calibration is measured on a GPU",
            hint="drop --device cpu and run it on the GPU machine to calibrate",
        )
    try:
        import torch
    except ImportError:
        cuda = False
    else:
        cuda = bool(torch.cuda.is_available())
    if not cuda:
        raise InputError(
            "`bench --calibrate` needs a GPU, and torch sees none on this machine",
            hint="run it on the GPU machine to calibrate (`gpuwise doctor` says why torch sees "
            "no GPU here)",
        )


def _check_device(report: BenchReport) -> str:
    """The GPU model the report may calibrate; InputError when the run cannot speak for it."""
    from gpuwise.errors import HardwareError
    from gpuwise.hardware import find_gpu

    named = report.device.gpu
    if named is None:
        raise InputError(
            "nothing to calibrate: the benchmarks ran without a GPU model to compare with",
            hint="run on a GPU, or name the model the figures are for with --gpu NAME",
        )
    if report.quick:
        raise InputError(
            "calibration is never written from `bench --quick` (small sizes check the code path, "
            "not the hardware)",
            hint="rerun `gpuwise bench --calibrate` without --quick",
        )
    if report.device.kind != "cuda":
        raise InputError(
            f"a {report.device.kind.upper()} run cannot calibrate {named}: the figures were not "
            "measured on that GPU",
            hint=f"run `gpuwise bench --calibrate` on a machine with {named}",
        )
    try:
        ran_on = find_gpu(report.device.name).name
    except (HardwareError, InputError):
        ran_on = None
    if ran_on != named:
        raise InputError(
            f"this run measured {report.device.name!r}, not {named}: calibration is written only "
            "for the GPU it ran on",
            hint="drop --gpu (gpuwise then uses the GPU it finds), or run on the GPU you name",
        )
    return named


def write_calibration(report: BenchReport, path: Path | None = None) -> Path:
    """Merge ``report``'s efficiencies into the calibration file (atomically); returns its path.

    Refused (InputError) for ``--quick`` runs, CPU runs and runs on a GPU other than the one named;
    the schema, validation and write belong to :mod:`gpuwise.estimate.calibration`.
    """
    gpu = _check_device(report)
    entry = calibration_entry(report)
    measured = set(entry) - {"notes"}
    if not measured:
        raise InputError(
            "nothing to calibrate: no measured figure has a datasheet peak to compare with",
            hint="include the matmul, memory or train groups (drop --only)",
        )
    return write_gpu_entry(
        gpu,
        entry,
        device=report.device.name,
        measured_at=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        path=path,
    )
