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
    """:class:`WorkloadModel` over gpuwise's estimator (issue 3), with a per-setup cache.

    ``max_zero`` is the parallelism the user allows: where the workload does not fit at its own
    ZeRO stage, the planner may raise the stage up to ``max_zero`` (None: never).
    """

    def __init__(self, workload: Any, calibration: Any = None, *, max_zero: int | None = None,
                 inter_node_gbit_s: float | None = None) -> None:
        self.workload = workload
        self.calibration = calibration
        self.max_zero = max_zero
        self.inter_node_gbit_s = inter_node_gbit_s
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

        workload = self.workload
        stage = int(getattr(workload, "zero", 0) or 0)
        while True:
            extra: dict[str, Any] = {}
            if self.inter_node_gbit_s is not None:
                extra["inter_node_gbit_s"] = self.inter_node_gbit_s
            if self.calibration is not None:
                extra["calibration"] = self.calibration
            est = estimate_workload(workload, gpu, gpus_per_node * nodes, gpus_per_node=gpus_per_node,
                                    suggest=False, **extra)
            if est.memory.fits or self.max_zero is None or stage >= self.max_zero:
                break
            stage += 1
            workload = workload.with_changes(zero=stage)
        if est.wall_hours is None:
            raise EstimateError("the workload has no size, so it has no hours",
                                hint="give --tokens (or --samples; --requests for inference)")
        mem = est.memory
        note = f"ZeRO-{stage} needed" if stage != int(getattr(self.workload, "zero", 0) or 0) else ""
        return Evaluation(fits=bool(mem.fits), per_gpu_memory_gib=float(mem.per_gpu_gib),
                          capacity_gib=float(mem.capacity_gib), hours=float(est.wall_hours),
                          checkpoint_gib=_checkpoint_gib(est), note=note)

    def describe(self) -> Mapping[str, Any]:
        to_dict = getattr(self.workload, "to_dict", None)
        if callable(to_dict):
            return dict(to_dict())
        from dataclasses import asdict, is_dataclass

        if is_dataclass(self.workload) and not isinstance(self.workload, type):
            return asdict(self.workload)
        return {"workload": repr(self.workload)}


def _checkpoint_gib(est: Any) -> float | None:
    """One full checkpoint: weights + optimizer states + fp32 master weights over all GPUs.

    Un-shards the per-GPU breakdown by the ZeRO stage (ZeRO paper Sec. 5: stage ≥ 1 shards
    optimizer states and master weights, stage 3 the weights) and by tensor × pipeline parallel.
    LoRA/QLoRA checkpoints hold the adapters (fp32) and their optimizer state, not the frozen base.
    """
    breakdown = getattr(est.memory, "breakdown", None)
    wl = getattr(est, "workload", None)
    if not isinstance(breakdown, dict) or wl is None:
        return None
    dp = int(getattr(est, "data_parallel", 1) or 1)
    zero = int(getattr(wl, "zero", 0) or 0)
    shard = int(getattr(wl, "tensor_parallel", 1) or 1) * int(getattr(wl, "pipeline_parallel", 1) or 1)
    f1 = dp if zero >= 1 else 1
    opt = (breakdown.get("optimizer_states", 0.0) + breakdown.get("master_weights", 0.0)) * f1
    if getattr(wl, "task", "") in ("lora", "qlora"):
        weights = float(getattr(est, "params_trainable", 0.0)) * 4 / 2**30
    else:
        weights = breakdown.get("weights", 0.0) * (dp if zero >= 3 else 1)
    if getattr(wl, "task", "") == "inference":
        return None
    return float((weights + opt) * shard)
