"""What the planner asks of a workload: memory and hours for a GPU setup.

The planner depends on one small interface, :class:`WorkloadModel`, so it can rank offers for
any source of estimates: :class:`EstimatorModel` wraps :func:`gpuwise.estimate.estimate_workload`
(the real thing), and tests use tiny hand-made models whose right answers are known.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from gpuwise.errors import EstimateError, HardwareError
from gpuwise.planner.network import InstanceNetwork
from gpuwise.planner.values import DEFAULT_MEMORY_HEADROOM

if TYPE_CHECKING:
    from gpuwise.estimate.estimator import Estimate
    from gpuwise.estimate.workload import Workload
    from gpuwise.hardware import GpuSpec
    from gpuwise.planner.settings import Settings


@dataclass(frozen=True)
class Evaluation:
    """A workload on ``nodes`` × ``gpus_per_node`` GPUs of one model, as the planner needs it."""

    fits: bool
    """Whether the per-GPU memory fits the GPU's capacity (with the best settings found)."""
    per_gpu_memory_gib: float
    """Memory needed on each GPU, GiB (the least any tried setting needs when nothing fits)."""
    capacity_gib: float
    """Usable memory of one GPU, GiB."""
    hours: float
    """Failure-free wall-clock hours for the whole job (no interruptions, no checkpoints)."""
    checkpoint_gib: float | None = None
    """Size of one full checkpoint (weights + optimizer state) in GiB; None when unknown."""
    note: str = ""
    """Anything the planner should pass on (e.g. "bf16 not supported: fp16 assumed")."""
    settings: Settings | None = None
    """The job's settings that give ``hours`` (None for models without settings)."""
    hours_p10: float | None = None
    """Optimistic end of the estimator's range for ``hours``; None when it gives none."""
    hours_p90: float | None = None
    """Pessimistic end of the estimator's range for ``hours``; None when it gives none."""
    evaluated: int = 1
    """Settings looked at to find this one."""
    weights_gib: float | None = None
    """Model weights to download before the job starts, GiB (None: unknown, no download time)."""
    limit_gib: float | None = None
    """Most memory a setting may need per GPU: ``capacity_gib`` less the headroom kept free
    (None: ``capacity_gib``)."""
    capacity_source: str = "published"
    """Where ``capacity_gib`` comes from: ``measured`` (calibration), ``published`` (the
    nvidia-smi figure) or ``datasheet`` (no reported figure known: likely a few percent high)."""


class WorkloadModel(Protocol):
    """Anything that gives per-GPU memory and hours for (gpu, gpus_per_node, nodes, network)."""

    def evaluate(
        self, gpu: str, gpus_per_node: int, nodes: int, network: InstanceNetwork
    ) -> Evaluation:
        """The workload on this setup; raise HardwareError/EstimateError when it cannot be estimated."""
        ...

    def describe(self) -> Mapping[str, Any]:
        """The workload spec, echoed in ``plan --json`` under ``workload``."""
        ...


class EstimatorModel:
    """:class:`WorkloadModel` over gpuwise's estimator, searching the job's settings per setup.

    ``search``: try recompute × ZeRO × micro-batch (training) or tensor parallel × batch
    (inference), :mod:`gpuwise.planner.settings`; False keeps the workload's settings, raising the
    ZeRO stage up to ``max_zero`` where it would not fit. ``max_batch`` caps inference concurrency.
    """

    def __init__(
        self,
        workload: Workload,
        calibration: Any = None,
        *,
        max_zero: int | None = None,
        search: bool = True,
        max_batch: int | None = None,
        memory_headroom: float = DEFAULT_MEMORY_HEADROOM,
    ) -> None:
        from gpuwise.estimate.calibration import Calibration, load_calibration
        from gpuwise.planner.settings import plan_global_batch

        # one recipe per plan: every option runs the same global batch (settings.plan_global_batch)
        gb, self.global_batch_source = plan_global_batch(workload)
        self.workload = (
            workload.with_changes(global_batch=gb)
            if gb is not None and gb != workload.global_batch
            else workload
        )
        # resolved once: None means the user's calibration file when there is one
        self.calibration = (
            calibration
            if isinstance(calibration, Calibration)
            else load_calibration(calibration)
            if calibration is not None
            else load_calibration()
        )
        self.max_zero = max_zero
        self.search = search
        self.max_batch = max_batch
        self.memory_headroom = memory_headroom
        self._cache: dict[
            tuple[str, int, int, float], Evaluation | HardwareError | EstimateError
        ] = {}
        from gpuwise.planner.settings import SearchCache

        self._search_cache = SearchCache()
        # GPU table look-ups (and their did-you-mean errors) once per GPU name, not per setup
        self._specs: dict[str, GpuSpec | HardwareError] = {}

    def _spec(self, gpu: str) -> GpuSpec:
        from gpuwise.hardware import find_gpu

        hit = self._specs.get(gpu)
        if hit is None:
            try:
                hit = find_gpu(gpu)
            except HardwareError as exc:
                hit = exc
            self._specs[gpu] = hit
        if isinstance(hit, HardwareError):
            raise hit
        return hit

    def evaluate(
        self, gpu: str, gpus_per_node: int, nodes: int, network: InstanceNetwork
    ) -> Evaluation:
        # one node never uses the network: share its evaluation across instance types
        key = (gpu, gpus_per_node, nodes, network.inter_node_gbit_s if nodes > 1 else 0.0)
        hit = self._cache.get(key)
        if hit is None:
            try:
                hit = self._evaluate(gpu, gpus_per_node, nodes, network.inter_node_gbit_s)
            except (HardwareError, EstimateError) as exc:
                hit = exc
            self._cache[key] = hit
        if isinstance(hit, Exception):
            raise hit
        return hit

    def _evaluate(self, gpu: str, gpn: int, nodes: int, gbit: float) -> Evaluation:
        from gpuwise.estimate.capacity import gpu_memory
        from gpuwise.estimate.memory import weight_bytes_per_param
        from gpuwise.planner.settings import (
            as_given,
            memory_limit_gib,
            search_inference,
            search_training,
        )

        spec = self._spec(gpu)
        room = self.memory_headroom
        wl = self.workload
        cal = self.calibration
        sized = (
            wl.requests is not None
            if wl.task == "inference"
            else (wl.total_tokens is not None or wl.samples is not None)
        )
        if not sized:
            raise EstimateError(
                "the workload has no size, so it has no hours",
                hint="give --tokens (or --samples; --requests for inference)",
            )
        if not self.search:
            found = as_given(wl, spec, gpn, nodes, gbit, cal, room)
            stage = wl.zero
            while found.estimate is None and self.max_zero is not None and stage < self.max_zero:
                stage += 1
                found = as_given(wl.with_changes(zero=stage), spec, gpn, nodes, gbit, cal, room)
        elif wl.task == "inference":
            found = search_inference(wl, spec, gpn, nodes, gbit, cal, self.max_batch, room)
        else:
            found = search_training(wl, spec, gpn, nodes, gbit, cal, self._search_cache, room)
        est = found.estimate
        mem = gpu_memory(spec, _for_gpu(cal, spec.name))
        limit = memory_limit_gib(spec, cal, room)
        if est is None:
            return Evaluation(
                fits=False,
                per_gpu_memory_gib=found.smallest_gib,
                capacity_gib=mem.total_gib,
                hours=float("inf"),
                evaluated=found.evaluated,
                limit_gib=limit,
                capacity_source=mem.source,
            )
        if est.wall_hours is None:
            raise EstimateError(
                "the workload has no size, so it has no hours",
                hint="give --tokens (or --samples; --requests for inference)",
            )
        return Evaluation(
            fits=True,
            per_gpu_memory_gib=float(est.memory.per_gpu_gib),
            capacity_gib=float(est.memory.capacity_gib),
            hours=float(est.wall_hours),
            checkpoint_gib=_checkpoint_gib(est),
            settings=found.settings,
            hours_p10=est.wall_hours_p10,
            hours_p90=est.wall_hours_p90,
            evaluated=found.evaluated,
            weights_gib=float(est.params_total) * weight_bytes_per_param(wl) / 2**30,
            limit_gib=limit,
            capacity_source=mem.source,
        )

    def describe(self) -> Mapping[str, Any]:
        from dataclasses import asdict

        out = asdict(self.workload)
        if self.global_batch_source:
            out["global_batch_source"] = self.global_batch_source
            if self.workload.global_batch and self.workload.model.is_transformer:
                out["global_batch_tokens"] = (
                    self.workload.global_batch * self.workload.effective_seq_len
                )
        return out


def _for_gpu(cal: Any, gpu: str) -> Any:
    return None if cal is None else cal.for_gpu(gpu)


def _checkpoint_gib(est: Estimate) -> float | None:
    """One full checkpoint: weights + optimizer states + fp32 master weights over all GPUs.

    Un-shards the per-GPU breakdown by the ZeRO stage (ZeRO paper Sec. 5: stage ≥ 1 shards
    optimizer states and master weights, stage 3 the weights) and by tensor × pipeline parallel.
    LoRA/QLoRA checkpoints hold the adapters (fp32) and their optimizer state, not the frozen base.
    """
    wl = est.workload
    if wl.task == "inference":
        return None
    breakdown = est.memory.breakdown
    dp = est.data_parallel
    shard = wl.non_data_parallel
    f1 = dp if wl.zero >= 1 else 1
    opt = (breakdown.get("optimizer_states", 0.0) + breakdown.get("master_weights", 0.0)) * f1
    if wl.task in ("lora", "qlora"):
        weights = float(est.params_trainable) * 4 / 2**30
    else:
        weights = breakdown.get("weights", 0.0) * (dp if wl.zero >= 3 else 1)
    return float((weights + opt) * shard)
