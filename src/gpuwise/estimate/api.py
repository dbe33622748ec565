"""``estimate_workload``, the library call: the estimator with its defaults filled in.

:mod:`.estimator` computes an estimate with the framework factors and the fix search it is given;
:mod:`.measured` fits the factors and :mod:`.suggest` searches the fixes, both by running that
estimator. This module sits above the three and joins them: the bundled fitted factors unless the
caller gives others, and the fix search unless ``suggest=False``.
"""

from __future__ import annotations

from typing import Any

from gpuwise.estimate.calibration import Calibration
from gpuwise.estimate.efficiency import EfficiencyModel
from gpuwise.estimate.estimator import USER_CALIBRATION, compute_estimate
from gpuwise.estimate.measured import default_efficiency
from gpuwise.estimate.result import Estimate
from gpuwise.estimate.suggest import suggest_fixes
from gpuwise.estimate.workload import Workload
from gpuwise.hardware import GpuSpec

__all__ = ["estimate_workload"]


def estimate_workload(
    workload: Workload,
    gpu: str | GpuSpec,
    gpus: int = 1,
    *,
    gpus_per_node: int | None = None,
    inter_node_gbit_s: float | None = None,
    calibration: Calibration | str | Any = USER_CALIBRATION,
    suggest: bool = True,
    efficiency: EfficiencyModel | None = None,
) -> Estimate:
    """Estimate ``workload`` on ``gpus`` GPUs of model ``gpu``.

    ``gpus_per_node`` defaults to ``min(gpus, 8)`` (GB200: its 72-GPU NVLink domain); ``inter_node_gbit_s`` is the network bandwidth
    per node (default: the GPU's usual instance, :func:`~gpuwise.estimate.throughput.default_inter_node`,
    and a note says so). ``calibration``: a :class:`Calibration`, a path, or
    None for none; by default the user's ``calibration.json`` when it exists. ``suggest=False``
    skips the search for fixes (the planner calls this for many setups). ``efficiency``: the
    framework factors and error bars (:class:`~gpuwise.estimate.efficiency.EfficiencyModel`); None =
    fitted to the bundled measured runs (the fixes are estimated with the same factors).
    Raises EstimateError/HardwareError/InputError for impossible setups (fp8 on a GPU without it,
    more tensor-parallel GPUs than GPUs, ...).
    """
    return compute_estimate(
        workload,
        gpu,
        gpus,
        gpus_per_node=gpus_per_node,
        inter_node_gbit_s=inter_node_gbit_s,
        calibration=calibration,
        efficiency=efficiency if efficiency is not None else default_efficiency(),
        fixes=suggest_fixes if suggest else None,
    )
