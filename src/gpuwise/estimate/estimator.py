"""``compute_estimate``: memory, FLOPs, MFU, time and fixes for one workload on one GPU setup.

Values in, values out: a :class:`~gpuwise.estimate.workload.Workload` and a GPU name or spec go
in, a frozen :class:`Estimate` comes out. Formulas live in :mod:`.memory` and :mod:`.throughput`;
this module puts them together, applies a calibration when there is one and the framework factors
it is given, and, when the workload does not fit, asks the fix search it is given for the fixes.

The fitted framework factors (:mod:`.measured`) and the fix search (:mod:`.suggest`) both run this
estimator, so they come in as parameters; :func:`gpuwise.estimate.api.estimate_workload`, the
library call, fills in the defaults.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from gpuwise.errors import EstimateError, InputError
from gpuwise.estimate.calibration import Calibration, GpuCalibration, load_calibration
from gpuwise.estimate.capacity import gpu_memory
from gpuwise.estimate.efficiency import EfficiencyModel, workload_class
from gpuwise.estimate.memory import (
    Overheads,
    memory_breakdown_bytes_cached,
    trainable_params,
)
from gpuwise.estimate.parts import (
    bubble_note,
    calibrated_mfu,
    comm_and_bubble,
    compute_precision,
    inference_step,
    rates,
    train_parts,
)
from gpuwise.estimate.result import Estimate, InferenceEstimate, MemoryEstimate, Suggestion
from gpuwise.estimate.steptime import (
    CNN_INFER_TRAFFIC_PASSES,
    DEFAULT_BANDWIDTH_FRACTION,
    FP8_CAST_BYTES,
    QLORA_DEQUANT_BYTES,
    STARTUP_HOURS,
    achievable_matmul,
    goodput,
)
from gpuwise.estimate.throughput import (
    Network,
    default_gpus_per_node,
    default_inter_node,
    forward_flops_per_token,
    network_for,
    peak_flops,
    training_flops_per_token,
)
from gpuwise.estimate.workload import AUTO_RECOMPUTE, TE_STACKS, Workload, recipe_recompute
from gpuwise.hardware import GpuSpec, find_gpu
from gpuwise.units import BYTES_PER_GIB

USER_CALIBRATION: Any = object()
"""``calibration=`` default: the user's ``calibration.json`` when it exists."""
_NO_HOURS = (
    "does not fit: no wall-clock or GPU-hours (it would not run); the fixes list settings that fit "
    "and what they cost in speed"
)
# Pretraining runs at least this big (stepping GPU-hours) are treated like the published whole runs
# (data/published_runs.csv, smallest 3,456 GPU-hours): their whole-run efficiency and error range apply.
WHOLE_RUN_GPU_HOURS = 3000.0


__all__ = [
    "USER_CALIBRATION",
    "Estimate",
    "FixSearch",
    "InferenceEstimate",
    "MemoryEstimate",
    "Suggestion",
    "compute_estimate",
    "quick_estimate",
]


class FixSearch(Protocol):
    """The search for changes that make a workload fit
    (:func:`~gpuwise.estimate.suggest.suggest_fixes`): called with the setup the estimator
    estimated, its tokens/s, and the framework factors to estimate each candidate with (by
    :func:`quick_estimate`)."""

    def __call__(
        self,
        wl: Workload,
        spec: GpuSpec,
        gpus: int,
        gpn: int,
        inter_gbit: float,
        cal: GpuCalibration | None,
        base_tps: float,
        eff: EfficiencyModel,
    ) -> Iterable[Suggestion]: ...


# ------------------------------------------------------------------------------------------


def _resolve_calibration(calibration: Any) -> Calibration | None:
    if calibration is USER_CALIBRATION:
        return load_calibration()
    if calibration is None or isinstance(calibration, Calibration):
        return calibration
    return load_calibration(calibration)


def compute_estimate(
    workload: Workload,
    gpu: str | GpuSpec,
    gpus: int = 1,
    *,
    gpus_per_node: int | None = None,
    inter_node_gbit_s: float | None = None,
    calibration: Calibration | str | Any = USER_CALIBRATION,
    efficiency: EfficiencyModel,
    fixes: FixSearch | None = None,
) -> Estimate:
    """Estimate ``workload`` on ``gpus`` GPUs of model ``gpu`` with the framework factors
    ``efficiency``, asking ``fixes`` (when given) for the changes that make it fit when it does not.

    ``gpus_per_node`` defaults to ``min(gpus, 8)`` (GB200: its 72-GPU NVLink domain); ``inter_node_gbit_s`` is the network bandwidth
    per node (default: the GPU's usual instance, :func:`~gpuwise.estimate.throughput.default_inter_node`,
    and a note says so). ``calibration``: a :class:`Calibration`, a path, or
    None for none; by default the user's ``calibration.json`` when it exists. ``efficiency``: the
    framework factors and error bars (:class:`~gpuwise.estimate.efficiency.EfficiencyModel`).
    Raises EstimateError/HardwareError/InputError for impossible setups (fp8 on a GPU without it,
    more tensor-parallel GPUs than GPUs, ...).
    """
    if not isinstance(
        workload, Workload
    ):  # estimate_workload(1, 2): a GpuwiseError, not AttributeError
        raise InputError(
            f"workload must be a Workload, got {type(workload).__name__}",
            hint="build one with gpuwise.workload_from_options(model=..., task=...)",
        )
    if not isinstance(gpu, (str, GpuSpec)):
        raise InputError(
            f"gpu must be a GPU name or a GpuSpec, got {type(gpu).__name__}",
            hint="give a name such as 'H100' (`gpuwise gpus` lists them)",
        )
    spec = find_gpu(gpu) if isinstance(gpu, str) else gpu
    if isinstance(gpus, bool) or not isinstance(gpus, int) or not 1 <= gpus <= 1 << 20:
        raise InputError(
            f"gpus={gpus!r} is not a whole number ≥ 1", hint="give the number of GPUs, e.g. gpus=8"
        )
    gpn = gpus_per_node if gpus_per_node is not None else default_gpus_per_node(spec, gpus)
    if isinstance(gpn, bool) or not isinstance(gpn, int) or gpn < 1:
        raise InputError(f"GPUs per node must be ≥ 1, got {gpn!r}", hint="give a positive number")
    gpn = min(gpn, gpus)
    if inter_node_gbit_s is None:
        inter_node_gbit_s, net_basis = default_inter_node(spec)
        if gpus > gpn:
            workload = workload.with_changes(notes=(*workload.notes, f"network: {net_basis}"))
    if not (math.isfinite(inter_node_gbit_s) and inter_node_gbit_s > 0):
        raise InputError(
            f"inter-node bandwidth must be > 0 Gbit/s, got {inter_node_gbit_s!r}",
            hint="give the network bandwidth per node, e.g. 400",
        )
    cal_doc = _resolve_calibration(calibration)
    cal = cal_doc.for_gpu(spec.name) if cal_doc else None
    return _estimate(workload, _Setup(spec, gpus, gpn, inter_node_gbit_s, cal, efficiency), fixes)


@dataclass(frozen=True)
class _Setup:
    """What one estimate runs on, resolved once: the GPU, how many, how many share a node, the
    network per node, that GPU's calibration and the framework factors."""

    spec: GpuSpec
    gpus: int
    gpn: int
    inter_gbit: float
    cal: GpuCalibration | None
    eff: EfficiencyModel


def _overheads(cal: GpuCalibration | None) -> Overheads:
    o = Overheads()
    if cal is not None:
        o = Overheads(
            cuda_context_gib=cal.cuda_context_gib
            if cal.cuda_context_gib is not None
            else o.cuda_context_gib,
            allocator_fraction=cal.allocator_fraction
            if cal.allocator_fraction is not None
            else o.allocator_fraction,
        )
    return o


def _shared(
    wl: Workload, setup: _Setup, notes: list[str]
) -> tuple[Workload, int, MemoryEstimate, dict[str, float], Network, int, str]:
    """Checks and what training and inference share: (workload, dp, memory, breakdown bytes, network,
    nodes, interconnect)."""
    spec, gpus, gpn, cal = setup.spec, setup.gpus, setup.gpn, setup.cal
    shard = wl.non_data_parallel
    if gpus % shard:
        raise EstimateError(
            f"{gpus} GPUs do not split into tensor × pipeline × context parallel = {shard}",
            hint="use a GPU count that is a multiple of tensor × pipeline × context parallel",
        )
    if wl.expert_parallel > 1 and (gpus // shard * wl.context_parallel) % wl.expert_parallel:
        raise EstimateError(
            f"expert parallel {wl.expert_parallel} does not divide the {gpus // shard} data-parallel "
            f"× {wl.context_parallel} context-parallel GPUs",
            hint="experts are split within the data-parallel group (Megatron-Core): pick a divisor",
        )
    if (
        wl.uses_flash_attention
        and wl.flash_attention_version == 3
        and spec.architecture != "Hopper"
    ):
        raise EstimateError(
            f"FlashAttention-3 runs on Hopper GPUs only, not on {spec.name}",
            hint="use --attention-kernel flash2",
        )
    if wl.tensor_parallel > gpn:
        raise EstimateError(
            f"tensor parallel {wl.tensor_parallel} spans more than one node of {gpn} GPUs",
            hint="keep tensor parallelism within a node (tensor_parallel ≤ gpus_per_node)",
        )
    dp = gpus // shard
    if (
        wl.precision == "bf16"
        and spec.peak_bf16_tflops is None
        and spec.peak_fp16_tflops is not None
    ):
        # same bytes, same tensor cores: estimate in fp16 rather than refuse (the planner ranks T4/V100 too)
        wl = wl.with_changes(precision="fp16")
        notes.append(
            f"{spec.name} has no bf16: estimated in fp16 (same memory; train with loss scaling)"
        )
    peak_flops(spec, wl.precision)  # raises for a precision the GPU lacks
    # hybrid sharding: the states are sharded over one node's data-parallel GPUs only
    sharded_over = min(dp, max(1, gpn // shard)) if wl.shard_within_node else dp
    breakdown_b = memory_breakdown_bytes_cached(wl, sharded_over, _overheads(cal))
    per_gpu = sum(breakdown_b.values()) / BYTES_PER_GIB
    # the memory the driver reports (measured, published nvidia-smi total, or the datasheet): the
    # breakdown already holds the CUDA context and the allocator allowance (estimate.capacity)
    capacity_gib = gpu_memory(spec, cal).total_gib
    runs = cal.measured_for(wl.model.name, wl.task) if cal and wl.is_training else None
    if runs is not None and runs.memory_ratio is not None:  # `gpuwise calibrate --from-runs`
        breakdown_b["measured_allowance"] = (runs.memory_ratio - 1) * sum(breakdown_b.values())
        per_gpu = sum(breakdown_b.values()) / BYTES_PER_GIB
    memory = MemoryEstimate(
        per_gpu_gib=per_gpu,
        capacity_gib=capacity_gib,
        fits=per_gpu <= capacity_gib,
        headroom_gib=capacity_gib - per_gpu,
        breakdown={k: v / BYTES_PER_GIB for k, v in breakdown_b.items()},
    )
    net = network_for(spec, gpn, setup.inter_gbit)
    nodes = math.ceil(gpus / gpn)
    if gpus == 1:
        interconnect = "single GPU"
    else:
        interconnect = net.intra_kind + (
            f"; {setup.inter_gbit:g} Gbit/s per node across {nodes} nodes" if nodes > 1 else ""
        )
    return wl, dp, memory, breakdown_b, net, nodes, interconnect


def _estimate(wl: Workload, setup: _Setup, fixes: FixSearch | None) -> Estimate:
    if wl.grad_ckpt == "auto":
        wl = _least_recompute(wl, setup)
    if wl.is_training:
        return _estimate_training(wl, setup, fixes)
    return _estimate_inference(wl, setup, fixes)


def _least_recompute(wl: Workload, setup: _Setup) -> Workload:
    """``grad_ckpt="auto"``: what the recipe does where the common recipe for the task and stack
    checkpoints by default (:func:`~gpuwise.estimate.workload.recipe_recompute`: QLoRA, Hugging Face
    fine-tunes); otherwise the least of :data:`AUTO_RECOMPUTE` under which the configuration fits
    or is tight (over only by the assumed fragmentation allowance) — how a configuration that ran is
    taken; full recompute when none does."""
    if not wl.is_training:
        return wl.with_changes(grad_ckpt="none")
    recipe = recipe_recompute(wl.task, wl.stack)
    if recipe is not None:  # the recipe checkpoints whether or not memory needs it
        mode, why = recipe
        note = f"--grad-ckpt auto: {why}"
        return wl.with_changes(grad_ckpt=mode, notes=(*wl.notes, note))
    for mode in AUTO_RECOMPUTE:
        candidate = wl.with_changes(grad_ckpt=mode)
        est = _estimate(candidate, setup, None)
        if est.memory.verdict != "does not fit":
            break
    note = f"--grad-ckpt auto: {mode} recompute, the least that fits or is tight"
    return candidate.with_changes(notes=(*wl.notes, note))


def _suggestions(
    wl: Workload, setup: _Setup, memory: MemoryEstimate, fixes: FixSearch | None, tps: float
) -> tuple[Suggestion, ...]:
    if fixes is not None and not memory.fits:
        s = setup
        return tuple(fixes(wl, s.spec, s.gpus, s.gpn, s.inter_gbit, s.cal, tps, s.eff))
    return ()


# Sharded data parallelism past the largest published series start: llm-foundry's FSDP tables
# (validation_dp_scaling.csv) lose 2-10% per GPU from 128 to 512 GPUs with the per-GPU work fixed, which
# the communication model, hiding the per-block collectives behind compute, does not lose.
_LARGE_DP_GPUS = 128
_LARGE_DP_NOTE = (
    "sharded data parallelism over {dp} GPUs: llm-foundry's published FSDP tables lose 2-10% of the "
    "per-GPU throughput from 128 to 512 GPUs, more than this estimate loses (data-parallel scaling "
    "series in benchmarks/estimate_accuracy.py)"
)


def _estimate_training(wl: Workload, setup: _Setup, fixes: FixSearch | None) -> Estimate:
    spec, gpus, gpn, cal, eff = setup.spec, setup.gpus, setup.gpn, setup.cal, setup.eff
    notes = list(wl.notes)
    wl, dp, memory, _, net, nodes, interconnect = _shared(wl, setup, notes)
    m = wl.model
    seq = wl.effective_seq_len
    adapter = trainable_params(wl) if wl.task in ("lora", "qlora") else 0.0
    prec, prec_note = compute_precision(wl, spec)
    if prec_note:
        notes.append(prec_note)
    peak = (
        spec.peak_tf32_tflops * 1e12
        if prec == "tf32" and spec.peak_tf32_tflops
        else peak_flops(spec, wl.precision)
    )
    fpt = training_flops_per_token(m, seq, wl.task, adapter)
    model = eff
    klass = workload_class(wl)
    factor, factor_basis = model.factor(spec.name, klass, wl.stack)
    parts, gb, basis = train_parts(
        wl, spec, gpus, dp, cal, prec, factor, model.attention_factor, adapter
    )
    tokens_step = gb * (seq if m.arch != "cnn" else 1)
    compute = parts.compute_s
    calibrated = calibrated_mfu(wl, spec, cal, adapter)
    if calibrated is not None:  # a measured MFU replaces the parts
        mfu_c, basis = calibrated
        compute = fpt * tokens_step / (gpus * peak * mfu_c)
    else:
        mfu_c = fpt * tokens_step / (gpus * peak * compute)
        basis = (
            f"step time from parts: {basis}; attention, memory-bound work at "
            f"{DEFAULT_BANDWIDTH_FRACTION if not (cal and cal.memory_bandwidth_efficiency) else cal.memory_bandwidth_efficiency:.0%} "
            f"of the bandwidth, recompute, optimizer; × {factor:.2f} framework factor ({factor_basis})"
        )
    comm, compute_b = comm_and_bubble(wl, spec, dp, net, compute, gb)
    if (bubble := bubble_note(wl, dp, gb)) is not None:
        notes.append(bubble)
    if wl.zero >= 2 and dp > _LARGE_DP_GPUS:
        notes.append(_LARGE_DP_NOTE.format(dp=dp))
    step = compute_b + comm
    tps = tokens_step / step
    sps = gb / step
    total = wl.total_tokens
    if m.arch == "cnn" and wl.samples is not None:
        total = wl.samples * wl.epochs
    stepping_hours = total / tps / 3600 if total is not None else None
    # pretraining runs the size of the published ones (the smallest, TinyLlama, is 3,456 GPU-hours) also lose
    # what those runs lost beyond failures (evaluation, checkpoint stalls, slower stacks than benchmark tables)
    threshold = (
        WHOLE_RUN_GPU_HOURS if model.whole_run_gpu_hours is None else model.whole_run_gpu_hours
    )
    whole_run = (
        wl.task == "pretrain" and stepping_hours is not None and stepping_hours * gpus >= threshold
    )
    run_eff = model.run_efficiency if whole_run else 1.0
    gput = goodput(gpus, stepping_hours) * run_eff
    wall = stepping_hours / gput if stepping_hours is not None else None
    p10 = p90 = None
    if wall is not None:  # whole pretraining runs: the published-runs range
        q = model.interval("pretraining-run" if whole_run else klass, spec.name, wl.stack)
        if q is not None:
            p10, p90 = wall * q[0], wall * q[1]
    flops_total = fpt * total if total is not None else None
    efficiency = compute / step
    if wl.global_batch is not None and gb != wl.global_batch:
        per_step = wl.micro_batch * dp
        why = (
            f"is smaller than micro-batch {wl.micro_batch} × {dp} data-parallel GPUs = {per_step} (each GPU "
            "runs at least one micro-batch per step)"
            if wl.global_batch < per_step
            else f"is not a multiple of micro-batch {wl.micro_batch} × {dp} data-parallel GPUs"
        )
        notes.append(
            f"--global-batch {wl.global_batch} {why}: estimated with a global batch of {gb}"
        )
    wl_out = wl if wl.global_batch == gb else replace(wl, global_batch=gb)
    if wl.tokens is None and wl.samples is None and wl.task == "pretrain":
        notes.append(
            f"no --tokens: assumed Chinchilla-optimal 20 tokens/parameter = {total:.3g} tokens"
        )
    if total is None:
        notes.append("no --tokens or --samples: give one for wall-clock hours and GPU-hours")
    else:
        notes.append(
            f"goodput {gput:.0%}: interruptions at Meta's Llama 3 rate for {gpus} GPUs, "
            f"{STARTUP_HOURS:g} h start-up"
            + (
                f", × {run_eff:.2f} whole-run efficiency of published pretraining runs"
                if run_eff != 1.0
                else ""
            )
            + " (wall_hours = stepping hours ÷ goodput)"
        )
    notes.extend(_training_notes(wl, seq, memory.fits))
    if memory.verdict == "does not fit" and wall is not None:
        # no hours (or dollars) for a run that cannot start: the fixes say what would fit
        wall = p10 = p90 = None
        notes.append(_NO_HOURS)
    mfu_eff = mfu_c * (compute / step)
    return Estimate(
        workload=wl_out,
        gpu=spec.name,
        gpus=gpus,
        gpus_per_node=gpn,
        nodes=nodes,
        data_parallel=dp,
        memory=memory,
        params_total=m.total_params,
        params_trainable=trainable_params(wl),
        flops_per_token=fpt,
        flops_total=flops_total,
        peak_tflops=peak / 1e12,
        mfu=mfu_eff,
        mfu_compute=mfu_c,
        mfu_basis=basis,
        scaling_efficiency=efficiency,
        step_time_s=step,
        comm_time_s=comm,
        interconnect=interconnect,
        tokens_per_second=tps,
        samples_per_second=sps,
        total_tokens=total,
        wall_hours=wall,
        gpu_hours=wall * gpus if wall is not None else None,
        suggestions=_suggestions(wl, setup, memory, fixes, tps),
        inference=None,
        notes=tuple(notes),
        goodput=gput,
        wall_hours_p10=p10,
        wall_hours_p90=p90,
        step_parts=parts.as_dict() if calibrated is None else {},
    )


def _fp8_recipe_notes(wl: Workload) -> list[str]:
    """What the fp8 recipe adds to a training step, or that an explicit ``--fp8-recipe`` is ignored."""
    if wl.precision != "fp8":
        if wl.fp8_recipe == "auto":
            return []
        return [
            f"--fp8-recipe {wl.fp8_recipe} applies to fp8 training only: ignored at "
            f"--precision {wl.precision}"
        ]
    if not wl.model.is_transformer:
        if wl.fp8_recipe == "auto":
            return []
        return [f"--fp8-recipe {wl.fp8_recipe}: casts are counted for transformer blocks only"]
    recipe = wl.float8_recipe
    if recipe != "te":
        casts = FP8_CAST_BYTES[recipe]
        return [
            f"fp8 recipe {recipe} (torchao float8): every linear layer's input and output "
            f"gradient cast at {casts.activation:g} bytes per element, its weight at "
            f"{casts.weight:g} bytes per element per micro-batch, at the memory bandwidth"
        ]
    note = (
        "fp8 recipe te (Transformer Engine: casts fused into the neighbouring kernels, as in "
        "the fitted NeMo and llm-foundry fp8 rows)"
    )
    if wl.fp8_recipe != "te" and wl.stack not in TE_STACKS:
        note += (
            f"; --stack {wl.stack} has no known fp8 recipe: PyTorch-native float8 (torchao) "
            "casts in kernels of its own, --fp8-recipe tensorwise counts them"
        )
    return [note]


def _training_notes(wl: Workload, seq: int, fits: bool) -> list[str]:
    """What the training estimate assumed about the model, precision and recipe, in words."""
    m = wl.model
    notes: list[str] = []
    if m.arch == "cnn" and not m.activation_mib_per_sample:
        notes.append("activation memory of this CNN is unknown to gpuwise and counted as 0")
    if wl.precision == "fp8":
        notes.append(
            "fp8: the blocks' linear layers run at the FP8 rate; attention, LM head and memory-bound work "
            "do not speed up; MFU is relative to the FP8 dense peak; weights and states as in bf16"
        )
    notes.extend(_fp8_recipe_notes(wl))
    if wl.grad_ckpt == "selective" and wl.uses_flash_attention and m.is_transformer:
        notes.append(
            "--grad-ckpt selective with FlashAttention saves no memory (FlashAttention keeps no "
            "score matrix for it to drop) and recomputes the attention core (a third more attention "
            "time): --grad-ckpt none needs as little; selective-op, selective-layer or full save memory"
        )
    if wl.task == "qlora":
        notes.append(
            f"qlora: the 4-bit base weights are dequantised in every pass over them "
            f"({QLORA_DEQUANT_BYTES:g} bytes per parameter per pass at the memory bandwidth): a fixed "
            "cost per micro-batch, so a larger share of the step at short sequences"
        )
    if m.is_transformer and seq >= 16384 and not fits:
        notes.append(
            "long context: activations grow with sequence length per GPU; context parallelism (split "
            "the sequence across GPUs) and a chunked/fused cross-entropy shrink them, more data-parallel "
            "GPUs do not"
        )
    return notes


def _estimate_inference(wl: Workload, setup: _Setup, fixes: FixSearch | None) -> Estimate:
    spec, gpus, gpn, cal, eff = setup.spec, setup.gpus, setup.gpn, setup.cal, setup.eff
    notes = list(wl.notes)
    wl, dp, memory, breakdown_b, net, nodes, interconnect = _shared(wl, setup, notes)
    m = wl.model
    prec, prec_note = compute_precision(wl, spec)
    if prec_note:
        notes.append(prec_note)
    peak = (
        spec.peak_tf32_tflops * 1e12
        if prec == "tf32" and spec.peak_tf32_tflops
        else peak_flops(spec, wl.precision)
    )
    model = eff
    klass = workload_class(wl)
    factor, factor_basis = model.factor(spec.name, klass)
    ach = achievable_matmul(spec, prec)
    frac = (cal.matmul_efficiency.get(prec) if cal is not None else None) or ach.fraction
    mfu_c = frac / factor
    basis = f"matmuls at {frac:.0%} of the {prec} peak ({ach.basis}) ÷ {factor:.2f} framework factor ({factor_basis})"
    fpt = forward_flops_per_token(
        m, wl.prompt_len + wl.output_len / 2 if wl.is_generative else wl.input_len
    )
    per_gpu_b = sum(breakdown_b.values())
    fixed = per_gpu_b - breakdown_b.get("kv_cache", 0.0)
    act_s = 0.0
    if m.arch == "cnn":  # activations written and read between layers (memory-bound, see .steptime)
        _, _, _, bw, _ = rates(wl, spec, cal, prec)
        act_b = 4.0 if wl.precision == "fp32" else 2.0
        act_s = (
            CNN_INFER_TRAFFIC_PASSES
            * m.activation_mib_per_sample
            * 2**20
            * (act_b / 4)
            * wl.micro_batch
            / bw
        )
        act_s *= factor
    inference, step = inference_step(
        wl,
        spec,
        peak,
        mfu_c,
        cal,
        memory.capacity_gib * BYTES_PER_GIB,
        fixed,
        net,
        act_s,
        model.layer_overhead_s,
    )
    if wl.is_generative:
        tps = inference.decode_tokens_per_second
        per_request_s = inference.time_to_first_token_s + wl.output_len * step
    else:  # encoders, ViT, CNN: tokens (or images) processed per second
        tps = inference.prefill_tokens_per_second
        per_request_s = step
    sps = wl.micro_batch / per_request_s
    total = (
        wl.requests * (wl.output_len if wl.is_generative else wl.input_len)
        if wl.requests is not None
        else None
    )
    wall = wl.requests / sps / 3600 if wl.requests is not None else None
    flops_total = (
        fpt * (wl.prompt_len + wl.output_len if wl.is_generative else wl.input_len) * wl.requests
        if wl.requests is not None
        else None
    )
    if dp > 1:
        tps, sps = tps * dp, sps * dp
        wall = wall / dp if wall is not None else None
    basis = (
        f"prefill: {basis}; decode: {inference.bandwidth_basis}"
        if wl.is_generative
        else f"{basis}; weights read at the {inference.bandwidth_basis}"
    )
    if wl.requests is None:
        notes.append("give --requests for hours to serve a workload")
    if wl.precision == "fp8":
        notes.append("fp8: MFU is relative to the FP8 dense peak; 1-byte weights and KV cache")
    if wl.fp8_recipe != "auto":
        notes.append(
            f"--fp8-recipe {wl.fp8_recipe} applies to fp8 training only: ignored for inference"
        )
    p10 = p90 = None
    if wall is not None:
        q = model.interval(klass, spec.name)
        if q is not None:
            p10, p90 = wall * q[0], wall * q[1]
    if memory.verdict == "does not fit" and wall is not None:
        wall = p10 = p90 = None
        notes.append(_NO_HOURS)
    return Estimate(
        workload=wl,
        gpu=spec.name,
        gpus=gpus,
        gpus_per_node=gpn,
        nodes=nodes,
        data_parallel=dp,
        memory=memory,
        params_total=m.total_params,
        params_trainable=trainable_params(wl),
        flops_per_token=fpt,
        flops_total=flops_total,
        peak_tflops=peak / 1e12,
        mfu=mfu_c,
        mfu_compute=mfu_c,
        mfu_basis=basis,
        scaling_efficiency=1.0,
        step_time_s=step,
        comm_time_s=0.0,
        interconnect=interconnect,
        tokens_per_second=tps,
        samples_per_second=sps,
        total_tokens=total,
        wall_hours=wall,
        gpu_hours=wall * gpus if wall is not None else None,
        suggestions=_suggestions(wl, setup, memory, fixes, tps),
        inference=inference,
        notes=tuple(notes),
        goodput=1.0,
        wall_hours_p10=p10,
        wall_hours_p90=p90,
    )


def quick_estimate(
    wl: Workload,
    spec: GpuSpec,
    gpus: int,
    gpn: int,
    inter_gbit: float,
    cal: GpuCalibration | None,
    eff: EfficiencyModel,
) -> Estimate:
    """An estimate without suggestions (used by the fix search)."""
    return _estimate(wl, _Setup(spec, gpus, gpn, inter_gbit, cal, eff), None)
