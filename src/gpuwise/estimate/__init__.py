"""Workload estimates: memory per GPU, FLOPs, MFU, time and GPU-hours; fixes when it does not fit.

Pure library (no torch, no network). The pieces:

- :mod:`.model`: model shapes (presets, HF ``config.json``, ``--params``) and parameter counts;
- :mod:`.workload`: the :class:`Workload` spec and :func:`workload_from_options`;
- :mod:`.memory`: per-GPU memory terms (ZeRO model states, Korthikanti activations, KV cache, ...);
- :mod:`.throughput`: FLOPs, communication time (and the older MFU fit to published runs, kept
  for ``benchmarks/estimate_gpu_hours.py``);
- :mod:`.steptime`: step time from named parts (achievable matmul rate, attention, memory-bound
  work, recompute, dequantisation) and goodput;
- :mod:`.efficiency`: the framework-factor model (:class:`EfficiencyModel`) the estimator applies;
- :mod:`.measured`: the measured per-step runs the framework factor and the error bars are fitted to;
- :mod:`.calibration`: the ``calibration.json`` schema: definition, validation and the atomic write
  (``gpuwise bench --calibrate`` hands it values);
- :mod:`.from_runs`: run records (``gpuwise calibrate --from-runs``) turned into calibration;
- :mod:`.estimator`: a workload, a GPU setup and the factors given → :class:`Estimate`;
- :mod:`.suggest`: fixes for a workload that does not fit, ranked by speed cost;
- :mod:`.api`: :func:`estimate_workload`, the estimator with the fitted factors and the fix search.

The library call is :func:`estimate_workload` (``gpuwise.estimate_workload(workload, "H100", 8)``);
``gpuwise.estimate`` is this package, a plain module.
"""

from __future__ import annotations

from gpuwise.estimate.api import estimate_workload
from gpuwise.estimate.calibration import (
    Calibration,
    GpuCalibration,
    default_calibration_path,
    load_calibration,
    write_run_entries,
)
from gpuwise.estimate.capacity import gpu_memory
from gpuwise.estimate.estimator import Estimate, InferenceEstimate, MemoryEstimate, Suggestion
from gpuwise.estimate.from_runs import RunsCalibration, calibrate_from_runs
from gpuwise.estimate.hf_config import parse_hf_config, resolve_model
from gpuwise.estimate.model import ModelConfig, get_preset, preset_names
from gpuwise.estimate.options import OPTIONS, SETUP_OPTIONS, WORKLOAD_OPTIONS, OptionSpec
from gpuwise.estimate.workload import (
    GRAD_CKPT,
    LORA_TARGETS,
    OPTIMIZERS,
    PRECISIONS,
    TASKS,
    Workload,
    workload_from_options,
)

__all__ = [
    "GRAD_CKPT",
    "LORA_TARGETS",
    "OPTIMIZERS",
    "OPTIONS",
    "PRECISIONS",
    "SETUP_OPTIONS",
    "TASKS",
    "WORKLOAD_OPTIONS",
    "Calibration",
    "Estimate",
    "GpuCalibration",
    "InferenceEstimate",
    "MemoryEstimate",
    "ModelConfig",
    "OptionSpec",
    "RunsCalibration",
    "Suggestion",
    "Workload",
    "calibrate_from_runs",
    "default_calibration_path",
    "estimate_workload",
    "get_preset",
    "gpu_memory",
    "load_calibration",
    "parse_hf_config",
    "preset_names",
    "resolve_model",
    "workload_from_options",
    "write_run_entries",
]
