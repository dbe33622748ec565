"""Fixes for a workload that does not fit, each re-estimated and ranked by the speed it costs.

Candidates (issue 3): mixed precision, gradient checkpointing, a smaller micro-batch with gradient
accumulation that keeps the global batch, ZeRO-2/3 (FSDP), CPU offload, 8-bit AdamW, LoRA or
QLoRA, a bigger GPU or more GPUs; for inference: fp8 weights, a smaller batch, tensor parallelism
and a bigger GPU. When no single change fits, the cheapest changes are combined.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gpuwise.errors import GpuwiseError
from gpuwise.estimate.calibration import GpuCalibration
from gpuwise.estimate.efficiency import EfficiencyModel
from gpuwise.estimate.estimator import quick_estimate
from gpuwise.estimate.result import Suggestion
from gpuwise.estimate.workload import Workload
from gpuwise.hardware import GpuSpec, gpu_table


def _speed_words(slowdown: float) -> str:
    if slowdown < 0.98:
        return f"{1 / slowdown:.2f}x faster"
    if slowdown <= 1.02:
        return "no speed cost"
    return f"{(slowdown - 1) * 100:.0f}% slower"


def _candidates(wl: Workload, spec: GpuSpec, gpus: int) -> Iterator[tuple[str, dict[str, Any]]]:
    """(fix text, changes) pairs; changes hold workload fields and optionally ``gpu``/``gpus``."""
    if wl.is_training:
        if wl.precision == "fp32":
            prec = "bf16" if spec.peak_bf16_tflops else "fp16"
            yield f"mixed precision (--precision {prec})", {"precision": prec}
        if wl.grad_ckpt == "none" and not wl.uses_flash_attention:
            yield (
                "selective activation recomputation (--grad-ckpt selective)",
                {"grad_ckpt": "selective"},
            )
        if wl.grad_ckpt in ("none", "selective") and wl.model.is_transformer:
            # torchtitan's partial recompute: less time than full, less memory than none
            yield (
                "recompute every second block (--grad-ckpt selective-layer)",
                {"grad_ckpt": "selective-layer"},
            )
            yield (
                "op-level selective recompute (--grad-ckpt selective-op)",
                {"grad_ckpt": "selective-op"},
            )
        if wl.grad_ckpt != "full":
            yield "full gradient checkpointing (--grad-ckpt full)", {"grad_ckpt": "full"}
        if wl.micro_batch > 1:
            gb = wl.global_batch or wl.micro_batch * gpus // (
                wl.tensor_parallel * wl.pipeline_parallel
            )
            mb = wl.micro_batch // 2
            while mb >= 1:
                yield (
                    f"micro-batch {mb} with gradient accumulation, same global batch "
                    f"(--micro-batch {mb} --global-batch {gb})",
                    {"micro_batch": mb, "global_batch": gb},
                )
                mb //= 2
        if gpus > 1:
            for z in (1, 2, 3):
                if wl.zero < z:
                    yield (
                        f"ZeRO-{z}{' / FSDP' if z == 3 else ''} across {gpus} GPUs (--zero {z})",
                        {"zero": z},
                    )
        yield from _layout_candidates(wl, gpus)
        if wl.optimizer == "adamw":
            yield "8-bit AdamW (--optimizer adamw8bit)", {"optimizer": "adamw8bit"}
        if not wl.cpu_offload and wl.task not in ("lora", "qlora"):
            yield (
                "CPU offload of optimizer states (ZeRO-Offload) (--offload optimizer)",
                {"offload": "optimizer"},
            )
        if wl.offload != "params" and wl.task not in ("lora", "qlora") and gpus > 1:
            yield (
                "ZeRO-3 with weights, gradients and optimizer states in CPU memory "
                "(--zero 3 --offload params)",
                {"zero": 3, "offload": "params"},
            )
        if wl.task in ("finetune",) and wl.model.is_transformer:
            yield (
                f"LoRA r={wl.lora_rank} instead of full fine-tuning (--task lora)",
                {"task": "lora"},
            )
        if wl.task in ("finetune", "lora") and wl.model.is_transformer:
            prec = "bf16" if spec.peak_bf16_tflops else "fp16"
            yield (
                f"QLoRA: 4-bit base + LoRA r={wl.lora_rank} (--task qlora)",
                {"task": "qlora", "precision": prec},
            )
    else:
        if wl.precision != "fp8" and spec.peak_fp8_tflops:
            yield "fp8 weights and KV cache (--precision fp8)", {"precision": "fp8"}
        mb = wl.micro_batch // 2
        while mb >= 1:
            yield f"serve {mb} sequences at a time (--micro-batch {mb})", {"micro_batch": mb}
            mb //= 2
        if gpus > 1 and wl.tensor_parallel < gpus:
            yield (
                f"tensor parallel across {gpus} GPUs (--tensor-parallel {gpus})",
                {"tensor_parallel": gpus},
            )


def _layout_candidates(wl: Workload, gpus: int) -> Iterator[tuple[str, dict[str, Any]]]:
    """Tensor parallelism (with sequence parallelism) and context parallelism on the same GPUs:
    they split activations, which more data-parallel GPUs do not."""
    m = wl.model
    if not m.is_transformer or gpus <= 1:
        return
    shard = wl.non_data_parallel
    tp = wl.tensor_parallel * 2
    while tp <= min(8, gpus // (shard // wl.tensor_parallel)):
        if m.heads % tp == 0 and gpus % (shard // wl.tensor_parallel * tp) == 0:
            yield (
                f"tensor parallel {tp} with sequence parallelism (--tensor-parallel {tp})",
                {"tensor_parallel": tp},
            )
            break
        tp *= 2
    seq = wl.effective_seq_len
    if seq >= 8192:
        cp = wl.context_parallel * 2
        while cp <= 16 and gpus % (shard // wl.context_parallel * cp) == 0:
            if seq % cp == 0:
                yield (
                    f"context parallel {cp}: split each sequence over {cp} GPUs "
                    f"(--context-parallel {cp})",
                    {"context_parallel": cp},
                )
            cp *= 2


def suggest_fixes(
    wl: Workload,
    spec: GpuSpec,
    gpus: int,
    gpn: int,
    inter_gbit: float,
    cal: GpuCalibration | None,
    base_tps: float,
    eff: EfficiencyModel,
) -> list[Any]:
    """Suggestions that fit, fastest first; a combination when no single change fits (each
    candidate estimated with the framework factors ``eff``)."""
    base_time = 1.0 / base_tps
    found: list[Suggestion] = []
    tried: list[tuple[float, str, dict[str, Any], float]] = []
    seen_mb_fit = False
    for fix, changes in _candidates(wl, spec, gpus):
        if "micro_batch" in changes and seen_mb_fit:
            continue
        try:
            new_wl = wl.with_changes(**changes)
            est = quick_estimate(new_wl, spec, gpus, gpn, inter_gbit, cal, eff)
        except GpuwiseError:
            continue
        slow = (1.0 / est.tokens_per_second) / base_time
        tried.append((est.memory.per_gpu_gib, fix, changes, slow))
        if est.memory.fits:
            if "micro_batch" in changes:
                seen_mb_fit = True  # the largest micro-batch that fits is the one to suggest
            found.append(
                Suggestion(
                    fix=fix,
                    per_gpu_gib=est.memory.per_gpu_gib,
                    fits=True,
                    slowdown=slow,
                    speed_cost=_speed_words(slow),
                    changes=changes,
                )
            )
    # LoRA/QLoRA change what is trained: they do not stand in for a fix that keeps the recipe
    software_fits = any(s.fits and "task" not in s.changes for s in found)
    found.extend(_hardware_fixes(wl, spec, gpus, gpn, inter_gbit, eff))
    if not software_fits and tried:  # no single setting fits on this hardware: combine them
        combo = _combine(wl, spec, gpus, gpn, inter_gbit, cal, tried, base_time, eff)
        if combo is not None:
            found.append(combo)
    # the cheapest change on the GPUs given comes first; a bigger GPU or more GPUs after
    found.sort(
        key=lambda s: (
            "gpu" in s.changes or "gpus" in s.changes,
            "task" in s.changes,
            s.slowdown,
            s.per_gpu_gib,
        )
    )
    return found


def _hardware_fixes(
    wl: Workload, spec: GpuSpec, gpus: int, gpn: int, inter_gbit: float, eff: EfficiencyModel
) -> list[Any]:
    """The smallest bigger GPU that fits, and the fewest more GPUs (with ZeRO-3 for training)."""
    out: list[Suggestion] = []
    # the base tokens/s is recomputed on the original setup so both sides use the same clock
    try:
        base = quick_estimate(wl, spec, gpus, gpn, inter_gbit, None, eff)
        base_tps = base.tokens_per_second
    except GpuwiseError:
        return out
    bigger = sorted(
        (
            s
            for s in gpu_table().specs
            if s.memory_gib > spec.memory_gib and s.vendor == spec.vendor
        ),
        key=lambda s: (s.memory_gib, s.name),
    )
    for other in bigger:
        try:
            est = quick_estimate(wl, other, gpus, gpn, inter_gbit, None, eff)
        except GpuwiseError:
            continue
        if est.memory.fits:
            slow = base_tps / est.tokens_per_second
            out.append(
                Suggestion(
                    fix=f"a bigger GPU: {other.name} ({other.memory_gib:g} GiB) (--gpu {other.name})",
                    per_gpu_gib=est.memory.per_gpu_gib,
                    fits=True,
                    slowdown=slow,
                    speed_cost=_speed_words(slow),
                    changes={"gpu": other.name},
                )
            )
            break
    changes: dict[str, Any] = {}
    new_wl = wl
    if wl.is_training and wl.zero < 3:
        changes["zero"] = 3
        new_wl = wl.with_changes(zero=3)
    n = gpus * 2
    while n <= 1024:
        inf_changes = {}
        if not wl.is_training:  # serve across the GPUs of one node with tensor parallelism
            tp = min(n, 8)
            if wl.model.heads % tp:
                break
            inf_changes = {"tensor_parallel": tp}
        try:
            cand = new_wl.with_changes(**inf_changes) if inf_changes else new_wl
            est = quick_estimate(cand, spec, n, min(n, max(gpn, 8)), inter_gbit, None, eff)
        except GpuwiseError:
            n *= 2
            continue
        if est.memory.fits:
            slow = base_tps / est.tokens_per_second * n / gpus  # per-GPU speed, not wall speed
            extra = " with ZeRO-3 / FSDP (--zero 3)" if "zero" in changes else ""
            extra += (
                f" and --tensor-parallel {inf_changes['tensor_parallel']}" if inf_changes else ""
            )
            out.append(
                Suggestion(
                    fix=f"more GPUs: {n} x {spec.name}{extra} (--gpus {n})",
                    per_gpu_gib=est.memory.per_gpu_gib,
                    fits=True,
                    slowdown=slow,
                    speed_cost=_speed_words(slow) + " per GPU",
                    changes={**changes, **inf_changes, "gpus": n},
                )
            )
            break
        n *= 2
    return out


def _combine(
    wl: Workload,
    spec: GpuSpec,
    gpus: int,
    gpn: int,
    inter_gbit: float,
    cal: GpuCalibration | None,
    tried: list[tuple[float, str, dict[str, Any], float]],
    base_time: float,
    eff: EfficiencyModel,
) -> Any:
    """Apply the single changes cheapest-first until the workload fits; CPU offload (PCIe traffic,
    host memory) comes after the on-GPU changes, and switching to LoRA/QLoRA changes what is
    trained, so it comes last. A stronger setting of an option already chosen (full recompute after
    selective) replaces it when it saves memory."""
    merged: dict[str, Any] = {}
    steps: list[tuple[str, dict[str, Any]]] = []
    mb_options = sorted(
        (t for t in tried if "micro_batch" in t[2]), key=lambda t: -t[2]["micro_batch"]
    )
    mb_done = False
    current_gib = float("inf")
    for _, fix, changes, _slow in sorted(
        tried, key=lambda t: ("task" in t[2], "offload" in t[2], t[3], t[0])
    ):
        if "micro_batch" in changes:
            if mb_done:
                continue
            mb_done = True
            options = mb_options  # the largest micro-batch that fits with the changes so far
        else:
            options = [(0.0, fix, changes, 0.0)]
        replaces = [k for k in changes if k in merged]  # a stronger setting of the same option
        chosen = None
        for _, opt_fix, opt_changes, _s in options:
            trial = {**merged, **opt_changes}
            try:
                est = quick_estimate(
                    wl.with_changes(**trial), spec, gpus, gpn, inter_gbit, cal, eff
                )
            except GpuwiseError:
                continue
            chosen = (opt_fix, trial, est)
            if est.memory.fits:
                break
        if chosen is None:
            continue
        if replaces and chosen[2].memory.per_gpu_gib >= current_gib:
            continue
        fix_text, merged, est = chosen
        current_gib = est.memory.per_gpu_gib
        keys = _chosen_keys(chosen, tried)
        steps = [(f, ch) for f, ch in steps if not set(ch) & keys]  # the one it replaces goes
        steps.append((fix_text, {k: merged[k] for k in keys}))
        if est.memory.fits:
            steps, est = _prune(wl, spec, gpus, gpn, inter_gbit, cal, steps, est, eff)
            merged = {k: v for _, ch in steps for k, v in ch.items()}
            slow = (1 / est.tokens_per_second) / base_time
            return Suggestion(
                fix=" + ".join(f for f, _ in steps),
                per_gpu_gib=est.memory.per_gpu_gib,
                fits=True,
                slowdown=slow,
                speed_cost=_speed_words(slow),
                changes=merged,
            )
    return None


def _chosen_keys(
    chosen: tuple[str, dict[str, Any], Any], tried: list[tuple[float, str, dict[str, Any], float]]
) -> set[str]:
    """The option names the chosen fix text changes."""
    for _, fix, changes, _s in tried:
        if fix == chosen[0]:
            return set(changes)
    return set()


def _prune(
    wl: Workload,
    spec: GpuSpec,
    gpus: int,
    gpn: int,
    inter_gbit: float,
    cal: GpuCalibration | None,
    steps: list[tuple[str, dict[str, Any]]],
    est: Any,
    eff: EfficiencyModel,
) -> tuple[list[tuple[str, dict[str, Any]]], Any]:
    """Drop combined changes the fit does not need and that do not speed it up (latest first)."""
    for i in range(len(steps) - 2, -1, -1):  # the last step made it fit: keep it
        rest = steps[:i] + steps[i + 1 :]
        changes = {k: v for _, ch in rest for k, v in ch.items()}
        try:
            trial = quick_estimate(
                wl.with_changes(**changes), spec, gpus, gpn, inter_gbit, cal, eff
            )
        except GpuwiseError:
            continue
        if (
            trial.memory.fits and trial.tokens_per_second >= est.tokens_per_second * 0.999
        ):  # never slower
            steps, est = rest, trial
    return steps, est
