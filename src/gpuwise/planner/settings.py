"""The job's own settings, searched per GPU setup: the cheapest way to run the job on an offer.

On one offer the price per hour is fixed, so the cheapest settings are the fastest that fit.

Training: activation recompute (none → selective → full) × ZeRO stage (0–3) × micro-batch, with
gradient accumulation keeping the global batch. In gpuwise's time model ZeRO 0, 1 and 2 move the
same bytes per step (one gradient all-reduce), so among them the lowest stage that fits the
largest micro-batch is taken; ZeRO-3 adds weight all-gathers (1.5× the traffic, Rajbhandari et al.
2020, Sec. 7) and is timed separately. Heavier recompute only costs time, so the search stops at
the first recompute level where ZeRO ≤ 2 fits. Hybrid sharding (shard in a node, replicate across
nodes) is not searched: the estimator has no time model for it yet.

Inference: tensor parallelism within the node (1, 2, 4, 8 dividing the GPUs per node and the
attention heads) × the number of concurrent sequences. With continuous batching and chunked
prefill (vLLM, Kwon et al. 2023) the concurrency is limited by the memory the KV cache has left
after the weights, not by prefilling the whole batch at once: the search asks the estimator how
many sequences' KV cache fit (``max_batch_that_fits``) and serves that many, up to the request's
``max_batch``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from gpuwise.errors import EstimateError
from gpuwise.estimate.api import estimate_workload
from gpuwise.estimate.capacity import gpu_memory
from gpuwise.estimate.estimator import Estimate
from gpuwise.estimate.memory import memory_breakdown_bytes
from gpuwise.estimate.workload import RECOMPUTE_SEARCH, GradCkpt, Workload
from gpuwise.hardware import GpuSpec
from gpuwise.units import BYTES_PER_GIB

Recompute = GradCkpt
# the search tries the three framework-neutral modes; a workload given with torchtitan's
# selective-op/selective-layer keeps it when the search is off
_RECOMPUTE: tuple[Recompute, ...] = RECOMPUTE_SEARCH
_MICRO_BATCHES = (1, 2, 4, 8, 16, 32, 64)
_TP = (1, 2, 4, 8)
SIMPLER_WITHIN = 0.01
"""Training settings: the simplest (least recompute, lowest ZeRO stage) within this fraction of
the fastest time are chosen. gpuwise's own rule, not a published figure: the estimator's error
bars are far wider than 1%, so a smaller gain is not evidence enough for a more complex setup."""
DEFAULT_MAX_BATCH = 256
"""Inference: most concurrent sequences tried when the request gives no ``max_batch``."""
DEFAULT_FINETUNE_GLOBAL_BATCH = 128
"""Fine-tuning (full, LoRA, QLoRA) sequences per optimizer step when none is given: Stanford
Alpaca's fine-tuning of LLaMA 7B/13B ("Batch size 128", github.com/tatsu-lab/stanford_alpaca
README, Fine-tuning table). A power of two, so 1, 2, 4, ... 128 data-parallel GPUs all reach it."""
DEFAULT_CNN_GLOBAL_BATCH = 256
"""Non-transformer (CNN) training images per step when none is given: He et al. 2016, "Deep
Residual Learning", Sec. 3.4 ("mini-batch size of 256")."""


class BatchSplitError(EstimateError):
    """The data-parallel degree of a setup does not divide the plan's global batch."""

    def __init__(self, global_batch: int, data_parallel: int) -> None:
        super().__init__(
            f"{data_parallel} data-parallel GPUs do not divide the global batch of {global_batch}",
            hint="give --global-batch as a multiple of the GPU count you want "
            f"(e.g. {global_batch - global_batch % data_parallel or data_parallel})",
        )
        self.global_batch = global_batch
        self.data_parallel = data_parallel


def plan_global_batch(wl: Workload) -> tuple[int | None, str]:
    """The global batch every option of a plan runs (sequences per optimizer step), and its source.

    Fixed for the whole plan so that options are the same training run: same optimizer steps,
    same tokens per step; each option reaches it with micro-batch × accumulation × data-parallel
    GPUs. None for inference.
    """
    from gpuwise.estimate.workload import DEFAULT_PRETRAIN_BATCH_TOKENS

    if wl.task == "inference":
        return None, ""
    if wl.global_batch is not None:
        return wl.global_batch, "given (--global-batch)"
    if not wl.model.is_transformer:
        return DEFAULT_CNN_GLOBAL_BATCH, "default for CNNs (He et al. 2016: 256 images)"
    if wl.task == "pretrain":
        seqs = -(-DEFAULT_PRETRAIN_BATCH_TOKENS // wl.effective_seq_len)
        return seqs, "pretraining default: 4M tokens per step (LLaMA, Touvron et al. 2023)"
    return (
        DEFAULT_FINETUNE_GLOBAL_BATCH,
        "fine-tuning default: 128 sequences (Stanford Alpaca)",
    )


@dataclass(frozen=True)
class Settings:
    """How the job runs on one GPU setup (part of every option and of its export)."""

    task: str
    """The workload's task (pretrain, finetune, lora, qlora, inference)."""
    zero: int = 0
    """ZeRO stage (0 = DDP; 3 = FSDP full shard)."""
    recompute: Recompute = "none"
    """Activation recomputation."""
    micro_batch: int = 1
    """Training: sequences per GPU per pass. Inference: concurrent sequences per replica."""
    global_batch: int | None = None
    """Training: sequences per optimizer step (kept across settings); None for inference."""
    accumulation: int = 1
    """Training: micro-batches per optimizer step on each data-parallel rank."""
    tensor_parallel: int = 1
    """GPUs one model copy is split over (inference: within the node)."""
    data_parallel: int = 1
    """Training: model replicas; micro_batch × accumulation × data_parallel = global_batch."""
    searched: bool = True
    """False when the workload's own settings were used as given."""

    @property
    def is_inference(self) -> bool:
        return self.task == "inference"

    def describe(self) -> str:
        """``ZeRO-3, full recompute, micro-batch 4 × 8 acc.`` or ``TP 8, batch 64``."""
        if self.is_inference:
            return f"TP {self.tensor_parallel}, batch {self.micro_batch}"
        parts = [f"ZeRO-{self.zero}" if self.zero else "DDP"]
        if self.recompute != "none":
            parts.append(f"{self.recompute} recompute")
        if self.tensor_parallel > 1:
            parts.append(f"TP {self.tensor_parallel}")
        mb = f"micro-batch {self.micro_batch}"
        if self.accumulation > 1:
            mb += f" × {self.accumulation} acc."
        if self.global_batch is not None:
            mb += f" × {self.data_parallel} GPUs = {self.global_batch}"
        parts.append(mb)
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return dict(_settings_dict(self))


@functools.lru_cache(maxsize=1024)
def _settings_dict(
    s: Settings,
) -> dict[str, Any]:  # cached: thousands of options share a few settings
    return {
        "zero": s.zero,
        "recompute": s.recompute,
        "micro_batch": s.micro_batch,
        "global_batch": s.global_batch,
        "accumulation": s.accumulation,
        "tensor_parallel": s.tensor_parallel,
        "data_parallel": s.data_parallel,
        "searched": s.searched,
        "text": s.describe(),
    }


@dataclass(frozen=True)
class Searched:
    """The best estimate of one setup, its settings, and how many settings were looked at."""

    estimate: Estimate | None
    """None when no settings fit."""
    settings: Settings | None
    evaluated: int
    """Settings whose memory or time was computed."""
    smallest_gib: float
    """Least per-GPU memory any tried setting needs (for "does not fit" messages)."""


class SearchCache:
    """Work shared by the searches of one workload: its setting variants and their memory per GPU.

    Memory per GPU depends on the settings and the data-parallel degree, not on the GPU model or
    the network, so one figure serves every offer with the same GPU count.
    """

    def __init__(self) -> None:
        self._variants: dict[tuple[object, ...], Workload] = {}
        self._need: dict[tuple[object, ...], float] = {}
        self._settings: dict[tuple[object, ...], Workload] = {}

    def variant(self, wl: Workload, **changes: object) -> Workload:
        key = (id(wl), *sorted(changes.items()))
        hit = self._variants.get(key)
        if hit is None:
            hit = self._variants[key] = wl.with_changes(**changes)
        return hit

    def setting(
        self, base: Workload, zero: int, recompute: Recompute, micro_batch: int
    ) -> Workload:
        """``base`` with one (ZeRO, recompute, micro-batch): :meth:`variant` with a cheaper key."""
        key = (id(base), zero, recompute, micro_batch)
        hit = self._settings.get(key)
        if hit is None:
            hit = self._settings[key] = self.variant(
                base, zero=zero, grad_ckpt=recompute, micro_batch=micro_batch
            )
        return hit

    def need_gib(self, wl: Workload, dp: int) -> float:
        key = (id(wl), dp)
        hit = self._need.get(key)
        if hit is None:
            hit = self._need[key] = sum(memory_breakdown_bytes(wl, dp).values()) / BYTES_PER_GIB
        return hit


def _fits(wl: Workload, capacity_gib: float, dp: int, cache: SearchCache) -> tuple[bool, float]:
    need = cache.need_gib(wl, dp)
    return need <= capacity_gib, need


def memory_limit_gib(spec: GpuSpec, calibration: Any, headroom: float = 0.0) -> float:
    """Most per-GPU memory a setting may need (everything the estimator counts, CUDA context
    included): the GPU's memory (measured, else reported, else datasheet) less ``headroom`` ×
    its usable memory (the total less the CUDA context), left free."""
    from gpuwise.estimate.calibration import Calibration

    cal = calibration.for_gpu(spec.name) if isinstance(calibration, Calibration) else None
    mem = gpu_memory(spec, cal)
    return mem.total_gib - headroom * mem.usable_gib


def _under(est: Estimate, limit_gib: float) -> bool:
    return bool(est.memory.fits) and float(est.memory.per_gpu_gib) <= limit_gib


def _settings_of(est: Estimate, searched: bool = True) -> Settings:
    wl = est.workload
    if wl.task == "inference":
        return Settings(
            task=wl.task,
            micro_batch=wl.micro_batch,
            tensor_parallel=wl.tensor_parallel,
            searched=searched,
        )
    gb = wl.global_batch
    acc = max(1, round(gb / (wl.micro_batch * est.data_parallel))) if gb else 1
    return Settings(
        task=wl.task,
        zero=wl.zero,
        recompute=wl.grad_ckpt,
        micro_batch=wl.micro_batch,
        global_batch=gb,
        accumulation=acc,
        tensor_parallel=wl.tensor_parallel,
        data_parallel=est.data_parallel,
        searched=searched,
    )


def as_given(
    wl: Workload,
    spec: GpuSpec,
    gpn: int,
    nodes: int,
    gbit: float,
    calibration: Any,
    headroom: float = 0.0,
) -> Searched:
    """The workload's own settings (no search); ``headroom``: share of usable memory left free."""
    _check_split(wl, gpn * nodes, micro_batch=True)
    est = estimate_workload(
        wl,
        spec,
        gpn * nodes,
        gpus_per_node=gpn,
        inter_node_gbit_s=gbit,
        calibration=calibration,
        suggest=False,
    )
    fits = _under(est, memory_limit_gib(spec, calibration, headroom))
    return Searched(
        est if fits else None,
        _settings_of(est, searched=False) if fits else None,
        1,
        float(est.memory.per_gpu_gib),
    )


def _check_split(wl: Workload, gpus: int, *, micro_batch: bool = False) -> None:
    """BatchSplitError when ``gpus`` cannot run the workload's global batch exactly: the
    data-parallel degree (× the workload's own micro-batch when ``micro_batch``) must divide it."""
    gb = wl.global_batch
    if gb is None or wl.task == "inference":
        return
    dp = max(1, gpus // wl.non_data_parallel)
    if gb % (dp * (wl.micro_batch if micro_batch else 1)):
        raise BatchSplitError(gb, dp)


def search_training(
    wl: Workload,
    spec: GpuSpec,
    gpn: int,
    nodes: int,
    gbit: float,
    calibration: Any,
    cache: SearchCache | None = None,
    headroom: float = 0.0,
) -> Searched:
    """Fastest fitting (recompute, ZeRO, micro-batch) with the global batch kept (module
    docstring); ``headroom``: share of usable memory left free."""
    cache = cache or SearchCache()
    gpus = gpn * nodes
    shard = wl.non_data_parallel
    dp = max(1, gpus // shard)
    gb = wl.global_batch if wl.global_batch is not None else plan_global_batch(wl)[0]
    _check_split(wl.with_changes(global_batch=gb), gpus)
    # whole micro-batches per rank: micro_batch × accumulation × dp is exactly the global batch
    per_rank = None if gb is None else gb // dp
    mbs = [m for m in _MICRO_BATCHES if per_rank is None or per_rank % m == 0]
    if wl.micro_batch not in mbs and (per_rank is None or per_rank % wl.micro_batch == 0):
        mbs = sorted({*mbs, wl.micro_batch})
    capacity = memory_limit_gib(spec, calibration, headroom)
    evaluated = 0
    smallest = float("inf")
    timed: list[tuple[float, int, int, Estimate]] = []  # hours, recompute level, ZeRO, estimate
    base = cache.variant(wl, global_batch=gb) if gb is not None else wl

    def largest_fit(zero: int, rc: Recompute) -> int | None:
        nonlocal evaluated, smallest
        fit = None
        for mb in mbs:
            evaluated += 1
            ok, need = _fits(cache.setting(base, zero, rc, mb), capacity, dp, cache)
            smallest = min(smallest, need)
            if not ok:
                break
            fit = mb
        return fit

    for rc in _RECOMPUTE:
        tried: list[tuple[int, int]] = []
        mb2 = largest_fit(2, rc) if dp > 1 else largest_fit(0, rc)
        if mb2 is not None:
            if dp == 1:
                tried.append((0, mb2))
            else:  # ZeRO 1/2 shard the optimizer step, so each stage that fits is timed
                for z in (0, 1):
                    evaluated += 1
                    if _fits(cache.setting(base, z, rc, mb2), capacity, dp, cache)[0]:
                        tried.append((z, mb2))
                tried.append((2, mb2))
        if dp > 1:
            mb3 = largest_fit(3, rc)
            if mb3 is not None and (mb2 is None or mb3 > mb2):
                tried.append((3, mb3))
        for zero, mb in tried:
            est = estimate_workload(
                cache.setting(base, zero, rc, mb),
                spec,
                gpus,
                gpus_per_node=gpn,
                inter_node_gbit_s=gbit,
                calibration=calibration,
                suggest=False,
            )
            evaluated += 1
            hours = est.wall_hours if est.wall_hours is not None else float("inf")
            if _under(est, capacity):
                timed.append((hours, _RECOMPUTE.index(rc), zero, est))
        if timed and mb2 == mbs[-1]:
            # heavier recompute only adds time once the largest micro-batch fits; before that it
            # can pay for itself by letting a larger micro-batch fit (fewer, fuller steps)
            break
    if not timed:
        return Searched(None, None, evaluated, smallest)
    fastest = min(t[0] for t in timed)
    # the simplest settings (least recompute, then lowest ZeRO stage) within SIMPLER_WITHIN of the
    # fastest: a sharded optimizer step that saves 0.03% is not worth a higher ZeRO stage
    best = min(
        (t for t in timed if t[0] <= fastest * (1 + SIMPLER_WITHIN)),
        key=lambda t: (t[1], t[2], t[0]),
    )
    return Searched(best[3], _settings_of(best[3]), evaluated, smallest)


def search_inference(
    wl: Workload,
    spec: GpuSpec,
    gpn: int,
    nodes: int,
    gbit: float,
    calibration: Any,
    max_batch: int | None,
    headroom: float = 0.0,
) -> Searched:
    """Fastest fitting (tensor parallel, concurrency) within the node (module docstring);
    ``headroom``: share of usable memory left free."""
    gpus = gpn * nodes
    limit = memory_limit_gib(spec, calibration, headroom)
    cap = max_batch or DEFAULT_MAX_BATCH
    heads = wl.model.heads if wl.model.is_transformer else 1
    evaluated = 0
    smallest = float("inf")
    best: tuple[float, Estimate] | None = None
    for tp in _TP:
        if (
            tp > gpn
            or gpn % tp
            or (heads and heads % tp)
            or (tp > 1 and not wl.model.is_transformer)
        ):
            continue
        one = wl.with_changes(tensor_parallel=tp, pipeline_parallel=1, micro_batch=1)
        est = estimate_workload(
            one,
            spec,
            gpus,
            gpus_per_node=gpn,
            inter_node_gbit_s=gbit,
            calibration=calibration,
            suggest=False,
        )
        evaluated += 1
        smallest = min(smallest, float(est.memory.per_gpu_gib))
        if not _under(est, limit):
            continue
        room = est.inference.max_batch_that_fits if est.inference is not None else 1
        batch = max(1, min(cap, room if room > 0 else 1))
        while batch > 1:
            big = estimate_workload(
                one.with_changes(micro_batch=batch),
                spec,
                gpus,
                gpus_per_node=gpn,
                inter_node_gbit_s=gbit,
                calibration=calibration,
                suggest=False,
            )
            evaluated += 1
            if _under(big, limit):
                est = big
                break
            batch //= 2
        hours = est.wall_hours if est.wall_hours is not None else float("inf")
        if best is None or hours < best[0]:
            best = (hours, est)
    if best is None:
        return Searched(None, None, evaluated, smallest)
    return Searched(best[1], _settings_of(best[1]), evaluated, smallest)
