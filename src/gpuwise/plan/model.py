"""What the planner asks of a workload: memory and hours for a GPU setup.

The planner depends on one small interface, :class:`WorkloadModel`, so it can rank offers for
any source of estimates: :class:`EstimatorModel` wraps :func:`gpuwise.estimate.estimate_workload`
(the real thing), and tests use tiny hand-made models whose right answers are known.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from gpuwise.errors import EstimateError, HardwareError


@dataclass(frozen=True)
class Evaluation:
    """A workload on ``nodes`` × ``gpus_per_node`` GPUs of one model, as the planner needs it."""

    fits: bool
    """Whether the per-GPU memory fits the GPU's capacity."""
    per_gpu_memory_gib: float
    """Memory needed on each GPU, GiB."""
    capacity_gib: float
    """Usable memory of one GPU, GiB."""
    hours: float
    """Failure-free wall-clock hours for the whole job (no interruptions, no checkpoints)."""
    checkpoint_gib: float | None = None
    """Size of one full checkpoint (weights + optimizer state) in GiB; None when unknown."""
    note: str = ""
    """Anything the planner should pass on (e.g. "bf16 not supported: fp16 assumed")."""


class WorkloadModel(Protocol):
    """Anything that gives per-GPU memory and hours for (gpu, gpus_per_node, nodes)."""

    def evaluate(self, gpu: str, gpus_per_node: int, nodes: int) -> Evaluation:
        """The workload on this setup; raise HardwareError/EstimateError when it cannot be estimated."""
        ...

    def describe(self) -> Mapping[str, Any]:
        """The workload spec, echoed in ``plan --json`` under ``workload``."""
        ...


class EstimatorModel:
    """:class:`WorkloadModel` over gpuwise's estimator (issue 3), with a per-setup cache."""

    def __init__(self, workload: Any, calibration: Any = None) -> None:
        self.workload = workload
        self.calibration = calibration
        self._cache: dict[tuple[str, int, int], Evaluation | Exception] = {}

    def evaluate(self, gpu: str, gpus_per_node: int, nodes: int) -> Evaluation:
        key = (gpu, gpus_per_node, nodes)
        hit = self._cache.get(key)
        if hit is None:
            try:
                hit = self._evaluate(gpu, gpus_per_node, nodes)
            except (HardwareError, EstimateError) as exc:
                hit = exc
            self._cache[key] = hit
        if isinstance(hit, Exception):
            raise hit
        return hit

    def _evaluate(self, gpu: str, gpus_per_node: int, nodes: int) -> Evaluation:
        from gpuwise.estimate import estimate_workload

        est = estimate_workload(self.workload, gpu, gpus_per_node * nodes, gpus_per_node=gpus_per_node,
                                calibration=self.calibration)
        mem = est.memory
        return Evaluation(fits=bool(mem.fits), per_gpu_memory_gib=float(mem.per_gpu_gib),
                          capacity_gib=float(mem.capacity_gib), hours=float(est.wall_hours),
                          checkpoint_gib=_checkpoint_gib(est))

    def describe(self) -> Mapping[str, Any]:
        to_dict = getattr(self.workload, "to_dict", None)
        if callable(to_dict):
            return dict(to_dict())
        from dataclasses import asdict, is_dataclass

        if is_dataclass(self.workload) and not isinstance(self.workload, type):
            return asdict(self.workload)
        return {"workload": repr(self.workload)}


def _checkpoint_gib(est: Any) -> float | None:
    """Weights + optimizer state from the estimate's memory breakdown, when it has one."""
    total = getattr(est, "checkpoint_gib", None)
    if isinstance(total, (int, float)):
        return float(total)
    mem = est.memory
    parts = [getattr(mem, name, None) for name in ("weights_total_gib", "optimizer_total_gib")]
    if all(isinstance(p, (int, float)) for p in parts):
        return float(sum(parts))  # type: ignore[arg-type]
    return None
