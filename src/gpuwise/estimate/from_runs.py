"""Calibration from real runs: what a pilot (or any run) measured, as figures the estimator uses.

``gpuwise calibrate --from-runs DIR`` hands this module the run records under DIR, each with the
plan file it ran (:mod:`gpuwise.base.runlog`). For every record this module rebuilds the
workload the plan priced, on the GPUs the run had, and finds the MFU at which the estimator's
step-time model reproduces the measured throughput (bisection: the step time falls as the MFU
rises; communication, pipeline bubbles and recompute stay modelled). That MFU is what carries to
other GPU counts and node layouts: the next ``gpuwise plan`` re-plans the whole job from it, and
its estimate for the measured setup is the measured figure. The measured peak memory becomes a
ratio to the estimator's peak for the same recipe.

Runs are grouped per GPU model, model and task (one LoRA step is not one full step); each group's
figure is the median of its runs, and says which runs back it
(:class:`~gpuwise.estimate.calibration.MeasuredWorkload`). A record that cannot speak for a GPU
(no GPU, no plan, no timed steps, an unknown GPU, a figure no MFU explains) is skipped with the
reason. Pure: no files are read or written here. A multi-node run is timed on its instance's
network when the caller hands in the planner's table (``network``), as the plan timed it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from gpuwise.base.recipe import PlanFile, Recipe, RunRecord
from gpuwise.base.runlog import FoundRun
from gpuwise.errors import GpuwiseError, InputError
from gpuwise.estimate.calibration import Calibration, GpuCalibration, MeasuredWorkload
from gpuwise.estimate.model import ModelConfig, get_preset
from gpuwise.estimate.result import Estimate
from gpuwise.estimate.workload import Workload

MFU_RANGE = (1e-4, 0.99)
"""The MFUs the bisection searches. Below 0.01% a run did no GPU work worth the name; at 99% every
FLOP would be useful: a figure outside this range is a broken record, not a measurement."""
TRAINING_TASKS = ("pretrain", "finetune", "lora", "qlora")
NetworkLookup = Callable[[str, str], float | None]
"""(cloud, instance type) → inter-node Gbit/s of that instance, None when unknown: the planner's
network table, handed in by the caller (the estimator does not know instances)."""


@dataclass(frozen=True)
class RunFit:
    """One run attempt's figures as the estimator sees them."""

    run: str
    """``<run id>/<attempt>``."""
    gpu: str
    """Canonical GPU name."""
    model: str
    task: str
    world_size: int
    mfu: float
    """The MFU at which the estimate matches the measured throughput."""
    memory_ratio: float | None
    """Measured peak memory ÷ estimated peak memory (None: the run measured no memory)."""
    tokens_per_s_per_gpu: float | None
    step_s: float | None
    peak_memory_gib: float | None
    ended: str | None
    estimated_tokens_per_s_per_gpu: float | None
    """The uncalibrated estimate's figure for the same setup (how far the model was off)."""
    rehearsal: bool = False
    """The run had no GPU and was taken as ``assume_gpu``'s (a CPU rehearsal)."""


@dataclass(frozen=True)
class RunsCalibration:
    """What :func:`calibrate_from_runs` made of a run history."""

    fits: tuple[RunFit, ...]
    entries: dict[str, list[dict[str, Any]]]
    """GPU → ``from_runs`` entries in the calibration file's schema."""
    skipped: tuple[str, ...]
    """``<run>: <reason>`` for every record that could not be used."""


def recipe_workload(recipe: Recipe, record: RunRecord | None = None) -> Workload:
    """The workload ``recipe`` describes, with the batch layout ``record`` ran (where it says)."""
    model = _model(recipe)
    r = record
    try:
        return Workload(
            model=model,
            task=recipe.task,  # type: ignore[arg-type]
            tokens=recipe.tokens,
            seq_len=(r.seq_len if r and r.seq_len else None) or recipe.seq_len,
            micro_batch=(r.micro_batch if r and r.micro_batch else None) or recipe.micro_batch,
            global_batch=(r.global_batch if r and r.global_batch else None) or recipe.global_batch,
            precision=recipe.precision,  # type: ignore[arg-type]
            optimizer=recipe.optimizer,  # type: ignore[arg-type]
            zero=recipe.zero,
            grad_ckpt=recipe.recompute,  # type: ignore[arg-type]
            lora_rank=recipe.lora_rank or 16,
            lora_targets=recipe.lora_targets or "all-linear",  # type: ignore[arg-type]
            tensor_parallel=recipe.tensor_parallel,
            pipeline_parallel=recipe.pipeline_parallel,
            context_parallel=recipe.context_parallel,
            expert_parallel=recipe.expert_parallel,
            master_weights=recipe.master_weights,  # type: ignore[arg-type]
        )
    except GpuwiseError as exc:
        raise InputError(f"the plan's recipe: {exc.message}", hint=exc.hint) from None


def _model(recipe: Recipe) -> ModelConfig:
    cfg = recipe.model_config
    if not cfg:
        return get_preset(recipe.model)
    known = {f.name for f in fields(ModelConfig)}
    try:
        return ModelConfig(**{k: v for k, v in cfg.items() if k in known})
    except (TypeError, ValueError) as exc:
        raise InputError(
            f"the plan's model_config for {recipe.model} is not a model gpuwise reads ({exc})",
            hint="save the plan again with this gpuwise (`gpuwise plan ... --save plan.json`)",
        ) from None


def calibrate_from_runs(
    runs: Sequence[FoundRun],
    base: Calibration | None = None,
    *,
    assume_gpu: str | None = None,
    network: NetworkLookup | None = None,
) -> RunsCalibration:
    """Fit every usable record, then group per GPU, model and task (medians; runs named).

    ``assume_gpu``: take records that ran without a GPU as runs on this GPU model (a rehearsal
    of the loop on CPU; the entries say ``rehearsal``). Without it such records are skipped.
    ``network``: the inter-node bandwidth of a multi-node run's instance, as the plan timed it
    (default: the GPU's usual network).
    """
    fits: list[RunFit] = []
    skipped: list[str] = []
    for run in runs:
        try:
            fits.append(
                fit_run(run.key, run.record, run.plan, base, assume_gpu=assume_gpu, network=network)
            )
        except _Skip as why:
            skipped.append(f"{run.key}: {why}")
    groups: dict[tuple[str, str, str], list[RunFit]] = {}
    for f in fits:
        groups.setdefault((f.gpu, f.model, f.task), []).append(f)
    entries: dict[str, list[dict[str, Any]]] = {}
    for (gpu, model, task), group in sorted(groups.items()):
        entries.setdefault(gpu, []).append(_entry(model, task, group))
    return RunsCalibration(fits=tuple(fits), entries=entries, skipped=tuple(skipped))


def _entry(model: str, task: str, group: list[RunFit]) -> dict[str, Any]:
    def median(values: list[float | None]) -> float | None:
        got = [v for v in values if v is not None]
        return float(statistics.median(got)) if got else None

    peaks = [f.peak_memory_gib for f in group if f.peak_memory_gib is not None]
    ended = [f.ended for f in group if f.ended]
    entry = {
        "model": model,
        "task": task,
        "mfu": round(float(statistics.median(f.mfu for f in group)), 6),
        "memory_ratio": median([f.memory_ratio for f in group]),
        "runs": [f.run for f in group],
        "tokens_per_s_per_gpu": median([f.tokens_per_s_per_gpu for f in group]),
        "step_s": median([f.step_s for f in group]),
        "peak_memory_gib": max(peaks) if peaks else None,
        "world_size": max(f.world_size for f in group),
        "measured_at": max(ended) if ended else None,
        "rehearsal": True if any(f.rehearsal for f in group) else None,
    }
    return {k: v for k, v in entry.items() if v is not None}


class _Skip(Exception):
    """A record that cannot calibrate anything; the message says why."""


def fit_run(
    key: str,
    rec: RunRecord,
    plan: PlanFile | None,
    base: Calibration | None = None,
    *,
    assume_gpu: str | None = None,
    network: NetworkLookup | None = None,
) -> RunFit:
    """The MFU (and memory ratio) at which the estimate reproduces one record; _Skip says why not."""
    from gpuwise.hardware import find_gpu

    if rec.outcome == "running" or rec.ended is None:
        raise _Skip("still running (no final figures)")
    if rec.steps_measured <= 0 or (not rec.tokens_per_s_per_gpu and not rec.step_s):
        raise _Skip("no timed steps (tokens/s and step time are missing)")
    gpu = rec.gpu or assume_gpu
    if not gpu:
        raise _Skip(
            "ran without a GPU: a CPU run cannot calibrate a GPU (--assume-gpu NAME rehearses)"
        )
    if plan is None:
        raise _Skip(
            f"no plan file for {rec.plan_id}" if rec.plan_id else "the record names no plan"
        )
    if plan.recipe.task not in TRAINING_TASKS:
        raise _Skip(f"task {plan.recipe.task} (only training runs calibrate)")
    try:
        spec = find_gpu(gpu)
        wl = recipe_workload(plan.recipe, rec)
    except GpuwiseError as exc:
        raise _Skip(exc.message) from None
    gpu_base = base.for_gpu(spec.name) if base else None
    gbit = None
    if network is not None and rec.nodes > 1 and rec.cloud and rec.instance_type:
        gbit = network(rec.cloud, rec.instance_type)

    def estimate(mfu: float | None) -> Estimate:
        from gpuwise.estimate.api import estimate_workload

        cal = replace(gpu_base or GpuCalibration(gpu=spec.name), from_runs=())
        if mfu is not None:
            entry = MeasuredWorkload(model=wl.model.name.lower(), task=wl.task, runs=(), mfu=mfu)
            cal = replace(cal, from_runs=(entry,))
        return estimate_workload(
            wl,
            spec,
            rec.world_size,
            gpus_per_node=rec.gpus_per_node,
            inter_node_gbit_s=gbit,
            calibration=Calibration(path="(fit)", gpus={spec.name: cal}),
            suggest=False,
        )

    try:
        plain = estimate(None)
        mfu = _bisect(estimate, rec)
        fitted = estimate(mfu)
    except GpuwiseError as exc:
        raise _Skip(f"the estimator cannot model the run: {exc.message}") from None
    return RunFit(
        run=key,
        gpu=spec.name,
        model=wl.model.name.lower(),
        task=wl.task,
        world_size=rec.world_size,
        mfu=mfu,
        memory_ratio=_memory_ratio(rec, fitted),
        tokens_per_s_per_gpu=rec.tokens_per_s_per_gpu,
        step_s=rec.step_s,
        peak_memory_gib=rec.peak_reserved_gib or rec.peak_memory_gib,
        ended=rec.ended,
        estimated_tokens_per_s_per_gpu=_per_gpu(plain),
        rehearsal=not rec.gpu,
    )


def _per_gpu(est: Estimate) -> float | None:
    return est.tokens_per_second / est.gpus if est.tokens_per_second else None


def _bisect(estimate: Any, rec: RunRecord) -> float:
    """The MFU whose estimate matches the record's tokens/s per GPU (else its step time)."""
    if rec.tokens_per_s_per_gpu:
        target = rec.tokens_per_s_per_gpu

        def speed(mfu: float) -> float:
            return _per_gpu(estimate(mfu)) or 0.0

        what = f"{target:,.0f} tokens/s per GPU"
    else:
        assert rec.step_s is not None  # checked by the caller
        target = 1.0 / rec.step_s

        def speed(mfu: float) -> float:
            return 1.0 / float(estimate(mfu).step_time_s)

        what = f"{rec.step_s:g} s per step"
    lo, hi = MFU_RANGE
    if speed(hi) < target:
        raise _Skip(f"{what} is faster than the model allows even at MFU {hi:.0%}")
    if speed(lo) > target:
        raise _Skip(f"{what} is slower than MFU {lo:.2%}: not a GPU run worth calibrating on")
    for _ in range(40):  # log-space bisection: 40 halvings pin the MFU far below 0.1%
        mid = math.sqrt(lo * hi)
        if speed(mid) < target:
            lo = mid
        else:
            hi = mid
    return math.sqrt(lo * hi)


def _memory_ratio(rec: RunRecord, est: Estimate) -> float | None:
    """(measured peak + the CUDA context torch does not count) ÷ the estimate's peak per GPU."""
    b = est.memory.breakdown
    if rec.peak_reserved_gib:
        measured = rec.peak_reserved_gib
    elif rec.peak_memory_gib:
        measured = rec.peak_memory_gib + b.get("allocator_overhead", 0.0)
    else:
        return None
    measured += b.get("cuda_context", 0.0)
    return measured / est.memory.per_gpu_gib if est.memory.per_gpu_gib > 0 else None
