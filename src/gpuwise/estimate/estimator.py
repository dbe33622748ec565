"""``estimate_workload``: memory, FLOPs, MFU, time and fixes for one workload on one GPU setup.

Values in, values out: a :class:`~gpuwise.estimate.workload.Workload` and a GPU name or spec go
in, a frozen :class:`Estimate` comes out. Formulas live in :mod:`.memory` and :mod:`.throughput`;
this module puts them together, applies a calibration when there is one, and, when the workload
does not fit, tries the fixes and ranks those that fit by the speed they cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from gpuwise.errors import EstimateError, InputError
from gpuwise.estimate.calibration import Calibration, GpuCalibration, load_calibration
from gpuwise.estimate.capacity import gpu_memory
from gpuwise.estimate.memory import (
    SELECTIVE_LAYER_EVERY,
    Overheads,
    activation_bytes,
    kv_cache_bytes,
    layer_activation_bytes,
    memory_breakdown_bytes_cached,
    trainable_params,
    weight_bytes_per_param,
)
from gpuwise.estimate.steptime import (
    ACTIVATION_TRAFFIC_PASSES,
    CNN_INFER_TRAFFIC_PASSES,
    CNN_TRAIN_TRAFFIC_PASSES,
    DEFAULT_BANDWIDTH_FRACTION,
    OPTIMIZER_TRAFFIC_BYTES,
    QLORA_DEQUANT_FACTOR,
    STARTUP_HOURS,
    StepParts,
    achievable_matmul,
    attention_efficiency,
    goodput,
)
from gpuwise.estimate.throughput import (
    DEFAULT_GPUS_PER_NODE,
    DEFAULT_INTER_NODE_GBIT_S,
    PCIE_X16_GB_S,
    SELECTIVE_OP_MATMUL_SHARE,
    Network,
    allreduce_seconds,
    attention_flops_per_token,
    forward_flops_per_token,
    network_for,
    peak_flops,
    recompute_factor,
    training_flops_per_token,
)
from gpuwise.estimate.workload import DEFAULT_PRETRAIN_BATCH_TOKENS, Workload
from gpuwise.hardware import GpuSpec, find_gpu
from gpuwise.units import BYTES_PER_GIB

if TYPE_CHECKING:
    from gpuwise.estimate.measured import EfficiencyModel

_NO_CALIBRATION = object()
# Pretraining runs at least this big (stepping GPU-hours) are treated like the published whole runs
# (data/published_runs.csv, smallest 3,456 GPU-hours): their whole-run efficiency and error range apply.
WHOLE_RUN_GPU_HOURS = 3000.0


@dataclass(frozen=True)
class MemoryEstimate:
    """Memory per GPU."""

    per_gpu_gib: float
    """Peak memory per GPU, all terms of ``breakdown`` summed."""
    capacity_gib: float
    """The GPU's memory as the driver reports it (measured, published nvidia-smi figure, or the
    datasheet where none is known): :func:`gpuwise.estimate.capacity.gpu_memory`."""
    fits: bool
    """``per_gpu_gib`` ≤ ``capacity_gib``."""
    headroom_gib: float
    """``capacity_gib - per_gpu_gib`` (negative: short by that much)."""
    breakdown: dict[str, float]
    """Term name → GiB: weights, gradients, optimizer_states, master_weights, activations, logits or
    kv_cache, comm_buffers, allocator_overhead, cuda_context."""

    @property
    def verdict(self) -> Literal["fits", "tight", "does not fit"]:
        """``tight``: over capacity only because of the fragmentation allowance (an assumption, not a
        measured figure): it may run, or run out of memory. ``fits`` stays strict, so the planner
        and the fixes avoid tight settings."""
        if self.fits:
            return "fits"
        if self.per_gpu_gib - self.breakdown.get("allocator_overhead", 0.0) <= self.capacity_gib:
            return "tight"
        return "does not fit"


@dataclass(frozen=True)
class Suggestion:
    """A change that makes the workload fit."""

    fix: str
    """What to change, as a person would say it (with the flag)."""
    per_gpu_gib: float
    """Memory per GPU after the change."""
    fits: bool
    """Whether it fits after the change."""
    slowdown: float
    """New time ÷ old time (1.0 = no cost, < 1 faster, 1.33 = a third slower)."""
    speed_cost: str
    """The slowdown in words."""
    changes: dict[str, Any]
    """The changed options (workload fields, ``gpu``, ``gpus``)."""


@dataclass(frozen=True)
class InferenceEstimate:
    """Serving figures: prefill is compute-bound, decode is memory-bandwidth-bound."""

    prefill_tokens_per_second: float
    """Prompt tokens processed per second (all sequences of the batch)."""
    decode_tokens_per_second: float
    """Generated tokens per second (all sequences of the batch)."""
    time_to_first_token_s: float
    """Prefill time of one batch."""
    latency_per_output_token_ms: float
    """Time per decode step: max(weights + KV bytes / bandwidth, FLOPs / compute)."""
    decode_bound: str
    """``memory`` or ``compute``: what limits a decode step."""
    kv_cache_gib_per_sequence: float
    """KV cache of one sequence at full context."""
    max_batch_that_fits: int
    """Most concurrent sequences the memory left after the weights holds (0 = weights do not fit)."""
    bandwidth_basis: str
    """Which memory bandwidth the decode figures assume."""


@dataclass(frozen=True)
class Estimate:
    """Everything gpuwise estimates for one workload on one GPU setup."""

    workload: Workload
    """The workload as estimated (defaults filled)."""
    gpu: str
    """Canonical GPU name."""
    gpus: int
    """GPUs in total."""
    gpus_per_node: int
    """GPUs per node (sets which traffic crosses the network)."""
    nodes: int
    """Nodes in use."""
    data_parallel: int
    """Data-parallel degree: gpus / (tensor × pipeline parallel)."""
    memory: MemoryEstimate
    """Memory per GPU and whether it fits."""
    params_total: float
    """All parameters."""
    params_trainable: float
    """Parameters with gradients (adapters only for LoRA/QLoRA; 0 for inference)."""
    flops_per_token: float
    """Model FLOPs per token (training: forward + backward, no recompute; inference: forward)."""
    flops_total: float | None
    """Model FLOPs of the whole run (None when its size is unknown)."""
    peak_tflops: float
    """Dense datasheet peak per GPU for the precision."""
    mfu: float
    """Model-FLOPs utilisation the step time assumes, communication and bubbles included:
    stepping time = flops_total / (gpus × peak × mfu); ``wall_hours`` is that ÷ ``goodput``."""
    mfu_compute: float
    """MFU before communication and pipeline bubbles (fitted or calibrated, recompute applied)."""
    mfu_basis: str
    """Where ``mfu_compute`` comes from, in words."""
    scaling_efficiency: float
    """Compute time ÷ step time (1.0 = communication fully hidden)."""
    step_time_s: float
    """Seconds per optimizer step (training) or per decode step (inference)."""
    comm_time_s: float
    """Communication per step that is not hidden behind compute, seconds."""
    interconnect: str
    """Intra-node link and, across nodes, the network bandwidth assumed."""
    tokens_per_second: float
    """Training tokens (or generated tokens) per second, all GPUs."""
    samples_per_second: float
    """Sequences (or images) per second, all GPUs."""
    total_tokens: float | None
    """Tokens of the whole run (None when unknown)."""
    wall_hours: float | None
    """Wall-clock hours for the run (None when its size is unknown)."""
    gpu_hours: float | None
    """wall_hours × gpus."""
    suggestions: tuple[Suggestion, ...]
    """Fixes that make it fit, cheapest in speed first (empty when it fits)."""
    inference: InferenceEstimate | None = None
    """Serving figures for ``task=inference``."""
    notes: tuple[str, ...] = field(default=())
    """Assumptions and defaults the figures rest on."""
    goodput: float = 1.0
    """Share of wall-clock time that advances training (failures, restarts, checkpoint stalls and
    evaluation excluded): wall_hours = steps × step_time_s ÷ goodput ÷ 3600."""
    wall_hours_p10: float | None = None
    """Low end (10th percentile) of ``wall_hours`` from the estimator's cross-validated errors."""
    wall_hours_p90: float | None = None
    """High end (90th percentile) of ``wall_hours`` from the estimator's cross-validated errors."""
    step_parts: dict[str, float] = field(default_factory=dict)
    """Training: seconds per step by part (matmul_s, attention_s, memory_bound_s, recompute_s,
    dequant_s, optimizer_s) and the framework_factor that multiplies the compute parts; empty when a
    calibrated MFU replaced them."""

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document."""
        wl = self.workload
        m = wl.model
        return {
            "workload": {
                "model": m.name,
                "arch": m.arch,
                "task": wl.task,
                "precision": wl.precision,
                "optimizer": wl.optimizer,
                "zero": wl.zero,
                "grad_ckpt": wl.grad_ckpt,
                "seq_len": wl.effective_seq_len,
                "micro_batch": wl.micro_batch,
                "global_batch": wl.global_batch,
                "tensor_parallel": wl.tensor_parallel,
                "pipeline_parallel": wl.pipeline_parallel,
                "cpu_offload": wl.cpu_offload,
                "flash_attention": wl.uses_flash_attention,
                "flash_attention_version": wl.flash_attention_version
                if wl.uses_flash_attention
                else None,
                "fused_kernels": wl.fused_kernels,
                "sequence_parallel": wl.sequence_parallel,
                "lora_rank": wl.lora_rank if wl.task in ("lora", "qlora") else None,
                "lora_targets": wl.lora_targets if wl.task in ("lora", "qlora") else None,
                "prompt_len": wl.prompt_len if wl.task == "inference" else None,
                "output_len": wl.output_len if wl.task == "inference" else None,
            },
            "gpu": self.gpu,
            "gpus": self.gpus,
            "gpus_per_node": self.gpus_per_node,
            "nodes": self.nodes,
            "data_parallel": self.data_parallel,
            "memory": {
                "per_gpu_gib": self.memory.per_gpu_gib,
                "capacity_gib": self.memory.capacity_gib,
                "fits": self.memory.fits,
                "verdict": self.memory.verdict,
                "headroom_gib": self.memory.headroom_gib,
                "breakdown": dict(self.memory.breakdown),
            },
            "params_total": self.params_total,
            "params_trainable": self.params_trainable,
            "flops_per_token": self.flops_per_token,
            "flops_total": self.flops_total,
            "peak_tflops": self.peak_tflops,
            "mfu": self.mfu,
            "mfu_compute": self.mfu_compute,
            "mfu_basis": self.mfu_basis,
            "scaling_efficiency": self.scaling_efficiency,
            "step_time_s": self.step_time_s,
            "comm_time_s": self.comm_time_s,
            "interconnect": self.interconnect,
            "tokens_per_second": self.tokens_per_second,
            "samples_per_second": self.samples_per_second,
            "total_tokens": self.total_tokens,
            "wall_hours": self.wall_hours,
            "gpu_hours": self.gpu_hours,
            "suggestions": [
                {
                    "fix": s.fix,
                    "per_gpu_gib": s.per_gpu_gib,
                    "fits": s.fits,
                    "slowdown": s.slowdown,
                    "speed_cost": s.speed_cost,
                    "changes": s.changes,
                }
                for s in self.suggestions
            ],
            "inference": None
            if self.inference is None
            else {k: getattr(self.inference, k) for k in self.inference.__dataclass_fields__},
            "notes": list(self.notes),
            "goodput": self.goodput,
            "wall_hours_p10": self.wall_hours_p10,
            "wall_hours_p90": self.wall_hours_p90,
            "step_parts": dict(self.step_parts),
        }


# ------------------------------------------------------------------------------------------


def _resolve_calibration(calibration: Any) -> Calibration | None:
    if calibration is _NO_CALIBRATION:
        return load_calibration()
    if calibration is None or isinstance(calibration, Calibration):
        return calibration
    return load_calibration(calibration)


def _mfu_compute(
    wl: Workload, gpu: GpuSpec, cal: GpuCalibration | None, adapter: float
) -> tuple[float, str] | None:
    """A calibrated MFU (measured by the user) for this workload, or None (the step-time model applies)."""
    m = wl.model
    seq = wl.effective_seq_len
    rf = recompute_factor(m, seq, wl.task, wl.grad_ckpt, adapter)
    rc = "" if rf == 1.0 else f"; × {rf:.2f} for {wl.grad_ckpt} recompute"
    if cal is not None and wl.is_training:
        by_model = cal.mfu_by_model.get(m.name.lower())
        if by_model is not None:
            return (
                by_model * rf,
                f"calibrated: measured MFU {by_model:.0%} for {m.name} on {gpu.name}{rc}",
            )
        if cal.mfu is not None:
            return cal.mfu * rf, f"calibrated: measured MFU {cal.mfu:.0%} on {gpu.name}{rc}"
    return None


def _default_global_batch(wl: Workload, dp: int) -> int:
    if wl.global_batch is not None:
        # each data-parallel rank runs whole micro-batches: a step is micro_batch × dp × accumulation
        per_step = wl.micro_batch * dp
        return math.ceil(wl.global_batch / per_step) * per_step
    if wl.task == "pretrain" and wl.model.arch in ("decoder", "encoder-decoder", "encoder"):
        seqs = math.ceil(DEFAULT_PRETRAIN_BATCH_TOKENS / wl.effective_seq_len)
        per_step = wl.micro_batch * dp
        return max(per_step, math.ceil(seqs / per_step) * per_step)
    return wl.micro_batch * dp


def _compute_precision(wl: Workload, spec: GpuSpec) -> tuple[str, str | None]:
    """(peak to use, note): fp32 convolutions run in TF32 where PyTorch defaults to it."""
    if wl.precision == "fp32" and spec.peak_tf32_tflops:
        if wl.model.arch == "cnn":
            return "tf32", (
                f"fp32 on {spec.name}: convolutions run on TF32 tensor cores (PyTorch default "
                "torch.backends.cudnn.allow_tf32=True); estimated at the TF32 peak"
            )
        return "fp32", (
            f"fp32 on {spec.name}: PyTorch runs matmuls in full FP32 by default; "
            "torch.set_float32_matmul_precision('high') uses TF32 tensor cores (several times faster)"
        )
    return wl.precision, None


def _rates(
    wl: Workload, spec: GpuSpec, cal: GpuCalibration | None, prec: str
) -> tuple[float, float, float, float, str]:
    """(matmul FLOP/s, 16-bit matmul FLOP/s, 16-bit peak FLOP/s, memory bytes/s, basis) on one GPU."""
    ach = achievable_matmul(spec, prec)
    frac, basis = ach.fraction, f"matmuls at {ach.fraction:.0%} of the {prec} peak ({ach.basis})"
    if cal is not None and cal.matmul_efficiency.get(prec):
        frac = cal.matmul_efficiency[prec]
        basis = f"matmuls at {frac:.0%} of the {prec} peak (calibrated on this GPU)"
    peak = spec.peak_tflops(prec) if prec == "tf32" else None
    mm = (peak * 1e12 if peak else peak_flops(spec, prec)) * frac
    p16 = "bf16" if spec.peak_bf16_tflops else "fp16"
    mm16, peak16 = mm, mm / frac
    if prec == "fp8":  # what fp8 does not cover runs in 16 bit
        ach16 = achievable_matmul(spec, p16)
        f16 = (cal.matmul_efficiency.get(p16) if cal is not None else None) or ach16.fraction
        peak16 = peak_flops(spec, p16)
        mm16 = peak16 * f16
    bw_frac = DEFAULT_BANDWIDTH_FRACTION
    if cal is not None and cal.memory_bandwidth_efficiency is not None:
        bw_frac = cal.memory_bandwidth_efficiency
    bw = (spec.memory_bandwidth_tb_s or 0.0) * 1e12 * bw_frac
    if bw <= 0:
        raise EstimateError(
            f"{spec.name}: no memory bandwidth figure", hint="add it to your gpus.csv"
        )
    return mm, mm16, peak16, bw, basis


def _train_parts(
    wl: Workload,
    spec: GpuSpec,
    gpus: int,
    dp: int,
    cal: GpuCalibration | None,
    prec: str,
    factor: float,
    attention_factor: float,
    adapter: float,
) -> tuple[StepParts, int, str]:
    """Step-time parts (see :mod:`.steptime`), global batch, and the basis in words."""
    m = wl.model
    seq = wl.effective_seq_len
    gb = _default_global_batch(wl, dp)
    tokens = gb * (seq if m.arch != "cnn" else 1)
    tp, pp = wl.tensor_parallel, wl.pipeline_parallel
    tok_gpu = tokens / gpus
    mm, mm16, peak16, bw, basis = _rates(wl, spec, cal, prec)
    act_b = 4.0 if wl.precision == "fp32" else 2.0
    if m.arch == "cnn" or not m.is_transformer:
        flops = training_flops_per_token(m, 1, wl.task, adapter) * tok_gpu
        matmul = flops / mm
        per_sample = activation_bytes(wl) / max(1, wl.micro_batch)
        memory = CNN_TRAIN_TRAFFIC_PASSES * per_sample * tok_gpu / bw
        attention = 0.0
        recompute = matmul / 3 + memory / 3 if wl.grad_ckpt == "full" else 0.0
    else:
        n = m.matmul_params
        mm_flops = (4.0 * n + 6.0 * adapter) if wl.task in ("lora", "qlora") else 6.0 * n
        if prec == "fp8":  # only the blocks' linear layers run in fp8
            covered = (
                min(1.0, (m.linear_params - (m.total_params - m.active_params)) / n) if n else 0.0
            )
            matmul = mm_flops * tok_gpu * (covered / mm + (1 - covered) / mm16)
        else:
            matmul = mm_flops * tok_gpu / mm
        attn_flops = attention_flops_per_token(m, seq) * tok_gpu
        flash = wl.uses_flash_attention
        causal = m.arch == "decoder"
        per_tok_layer = layer_activation_bytes(m, 1, 1, tp=tp, flash=True, act_bytes=act_b)
        traffic = per_tok_layer * m.total_layers * tok_gpu * tp  # tokens each GPU's layers see
        if flash:
            attention = (
                attn_flops
                * (0.5 if causal else 1.0)
                / (peak16 * attention_efficiency(spec, wl.flash_attention_version))
            )
        else:  # score matrix written and read: 4 passes forward, 4 backward (assumption)
            attention = attn_flops / mm16
            traffic += (
                8
                * act_b
                * m.heads
                / tp
                * seq
                * m.total_layers
                * tok_gpu
                * tp
                / ACTIVATION_TRAFFIC_PASSES
            )
        if m.has_lm_head:
            traffic += m.vocab / tp * (act_b + 8.0) * tok_gpu * tp / pp
        memory = ACTIVATION_TRAFFIC_PASSES * traffic / bw
        recompute = 0.0
        if (
            wl.grad_ckpt == "full"
        ):  # the forward pass again: a third of fwd+bwd attention and traffic
            recompute = 2.0 * n * tok_gpu / (mm if prec != "fp8" else mm16) + memory / 3
            attention *= 4 / 3
        elif wl.grad_ckpt == "selective":  # the attention core again (Korthikanti et al. 2022)
            attention *= 4 / 3
        elif wl.grad_ckpt == "selective-layer":  # every second block's forward again (torchtitan)
            recompute = (
                2.0 * n * tok_gpu / (mm if prec != "fp8" else mm16) + memory / 3
            ) / SELECTIVE_LAYER_EVERY
            attention *= 1 + 1 / (3 * SELECTIVE_LAYER_EVERY)
        elif wl.grad_ckpt == "selective-op":  # the unsaved matmuls and all memory-bound ops again
            recompute = (
                2.0 * n * tok_gpu * SELECTIVE_OP_MATMUL_SHARE / (mm if prec != "fp8" else mm16)
                + memory / 3
            )
    dequant = 0.0
    if wl.task == "qlora":
        dequant = (QLORA_DEQUANT_FACTOR - 1.0) * (matmul + attention + memory + recompute)
    train = trainable_params(wl) / (tp * pp) / (dp if wl.zero >= 1 else 1)
    optimizer = train * OPTIMIZER_TRAFFIC_BYTES.get(wl.optimizer, 28.0) / bw
    parts = StepParts(
        matmul_s=matmul,
        attention_s=attention,
        memory_s=memory,
        recompute_s=recompute,
        dequant_s=dequant,
        optimizer_s=optimizer,
        framework_factor=factor,
        attention_factor=attention_factor,
    )
    return parts, gb, basis


def _comm_and_bubble(
    wl: Workload, gpu: GpuSpec, dp: int, net: Network, compute: float, gb: int
) -> tuple[float, float]:
    """(exposed communication seconds, compute seconds with the pipeline bubble) for one step."""
    m = wl.model
    seq = wl.effective_seq_len
    accum = max(1.0, gb / (wl.micro_batch * dp))
    if wl.pipeline_parallel > 1:  # 1F1B bubble (p-1)/m (Narayanan et al. 2021, Sec. 2.2.1)
        compute *= 1 + (wl.pipeline_parallel - 1) / accum
    shard = wl.tensor_parallel * wl.pipeline_parallel
    grad_b = 4.0 if wl.precision == "fp32" or wl.task == "lora" else 2.0
    comm = 0.0
    if dp > 1:
        dp_net = replace(net, gpus_per_node=max(1, net.gpus_per_node // shard))
        if wl.zero >= 3:
            weights = m.total_params / shard * weight_bytes_per_param(wl)
            comm = 1.5 * allreduce_seconds(weights, dp, dp_net) * accum
            hidden_by = compute
        else:
            comm = allreduce_seconds(trainable_params(wl) / shard * grad_b, dp, dp_net)
            hidden_by = compute / accum * 2 / 3  # the last micro-batch's backward pass
        comm = max(0.0, comm - hidden_by)
    if wl.tensor_parallel > 1 and m.is_transformer:
        act_b = 4.0 if wl.precision == "fp32" else 2.0
        per = allreduce_seconds(
            wl.micro_batch * seq * m.hidden * act_b,
            wl.tensor_parallel,
            replace(net, gpus_per_node=max(net.gpus_per_node, 1)),
        )
        comm += 4 * per * m.total_layers / wl.pipeline_parallel * accum
    if wl.cpu_offload:  # 16-bit gradients down and weights up over PCIe each step (ZeRO-Offload)
        pcie = PCIE_X16_GB_S.get(gpu.pcie_gen or 4, 31.5) * 1e9
        comm += 2 * trainable_params(wl) / shard / dp * 2.0 / pcie
    return comm, compute


def _inference(
    wl: Workload,
    gpu: GpuSpec,
    peak: float,
    mfu_c: float,
    cal: GpuCalibration | None,
    capacity_bytes: float,
    fixed_bytes: float,
    net: Network,
    act_s: float = 0.0,
) -> tuple[InferenceEstimate, float]:
    m = wl.model
    b, p, o = wl.micro_batch, wl.prompt_len, wl.output_len
    tp = wl.tensor_parallel * wl.pipeline_parallel
    if cal is not None and cal.memory_bandwidth_efficiency is not None:
        eff_bw = cal.memory_bandwidth_efficiency
        bw_basis = f"calibrated: {eff_bw:.0%} of the datasheet bandwidth"
    else:
        eff_bw = 1.0
        bw_basis = "datasheet peak bandwidth (a lower bound on latency; calibrate with `gpuwise bench --calibrate`)"
    bw = (gpu.memory_bandwidth_tb_s or 0.0) * 1e12 * eff_bw
    if bw <= 0:
        raise EstimateError(
            f"{gpu.name}: no memory bandwidth figure", hint="add it to your gpus.csv"
        )
    weights = m.total_params * weight_bytes_per_param(wl) / tp
    if not wl.is_generative:  # one forward pass per request: max(compute, reading the weights)
        n_in = wl.input_len
        flops = b * (
            forward_flops_per_token(m, n_in) * n_in
            if m.arch != "cnn"
            else forward_flops_per_token(m, 1)
        )
        t_cmp, t_mem = flops / (tp * peak * mfu_c) + act_s, weights / bw
        step = max(t_cmp, t_mem)
        est = InferenceEstimate(
            prefill_tokens_per_second=b * n_in / step,
            decode_tokens_per_second=0.0,
            time_to_first_token_s=step,
            latency_per_output_token_ms=step * 1000,
            decode_bound="memory" if t_mem >= t_cmp else "compute",
            kv_cache_gib_per_sequence=0.0,
            max_batch_that_fits=0,
            bandwidth_basis=bw_basis,
        )
        return est, step
    prefill_flops = b * p * forward_flops_per_token(m, p / 2)
    ttft = prefill_flops / (tp * peak * mfu_c)
    if m.experts:  # a decode step reads the experts its batch routes to: at most all of them
        active = m.active_params * weight_bytes_per_param(wl) / tp
        weights = min(weights, active * b)
    kv_avg = kv_cache_bytes(wl) * (p + o / 2) / (p + o)
    t_mem = (weights + kv_avg) / bw
    t_cmp = b * forward_flops_per_token(m, p + o / 2) / (tp * peak * mfu_c)
    step = max(t_mem, t_cmp)
    if wl.tensor_parallel > 1 and m.is_transformer:
        # 2 all-reduces of the b x h hidden state per layer per token (Megatron-LM, Shoeybi et al. 2019,
        # Sec. 3); bandwidth term only: per-collective latency is not modelled
        act_b = 4.0 if wl.precision == "fp32" else 2.0
        per = allreduce_seconds(b * m.hidden * act_b, wl.tensor_parallel, net)
        step += 2 * m.total_layers / wl.pipeline_parallel * per
        ttft += (
            2
            * m.total_layers
            / wl.pipeline_parallel
            * allreduce_seconds(b * p * m.hidden * act_b, wl.tensor_parallel, net)
        )
    kv_seq = kv_cache_bytes(wl, batch=1)
    free = capacity_bytes - fixed_bytes
    max_b = int(free // kv_seq) if kv_seq > 0 and free > 0 else (0 if free <= 0 else 1 << 20)
    est = InferenceEstimate(
        prefill_tokens_per_second=b * p / ttft if ttft > 0 else math.inf,
        decode_tokens_per_second=b / step,
        time_to_first_token_s=ttft,
        latency_per_output_token_ms=step * 1000,
        decode_bound="memory" if t_mem >= t_cmp else "compute",
        kv_cache_gib_per_sequence=kv_seq / BYTES_PER_GIB,
        max_batch_that_fits=max(0, min(max_b, 1 << 20)),
        bandwidth_basis=bw_basis,
    )
    return est, step


def estimate_workload(
    workload: Workload,
    gpu: str | GpuSpec,
    gpus: int = 1,
    *,
    gpus_per_node: int | None = None,
    inter_node_gbit_s: float = DEFAULT_INTER_NODE_GBIT_S,
    calibration: Calibration | str | Any = _NO_CALIBRATION,
    suggest: bool = True,
    efficiency: EfficiencyModel | None = None,
) -> Estimate:
    """Estimate ``workload`` on ``gpus`` GPUs of model ``gpu``.

    ``gpus_per_node`` defaults to ``min(gpus, 8)``; ``inter_node_gbit_s`` is the network bandwidth
    per node (default 400 Gbit/s, an AWS p4d). ``calibration``: a :class:`Calibration`, a path, or
    None for none; by default the user's ``calibration.json`` when it exists. ``suggest=False``
    skips the search for fixes (the planner calls this for many setups). ``efficiency``: the
    framework factors and error bars (:class:`~gpuwise.estimate.measured.EfficiencyModel`); None =
    fitted to the bundled measured runs.
    Raises EstimateError/HardwareError/InputError for impossible setups (fp8 on a GPU without it,
    more tensor-parallel GPUs than GPUs, ...).
    """
    spec = find_gpu(gpu) if isinstance(gpu, str) else gpu
    if isinstance(gpus, bool) or not isinstance(gpus, int) or not 1 <= gpus <= 1 << 20:
        raise InputError(
            f"gpus={gpus!r} is not a whole number ≥ 1", hint="give the number of GPUs, e.g. gpus=8"
        )
    gpn = gpus_per_node if gpus_per_node is not None else min(gpus, DEFAULT_GPUS_PER_NODE)
    if isinstance(gpn, bool) or not isinstance(gpn, int) or gpn < 1:
        raise InputError(f"GPUs per node must be ≥ 1, got {gpn!r}", hint="give a positive number")
    gpn = min(gpn, gpus)
    if not (math.isfinite(inter_node_gbit_s) and inter_node_gbit_s > 0):
        raise InputError(
            f"inter-node bandwidth must be > 0 Gbit/s, got {inter_node_gbit_s!r}",
            hint="give the network bandwidth per node, e.g. 400",
        )
    cal_doc = _resolve_calibration(calibration)
    cal = cal_doc.for_gpu(spec.name) if cal_doc else None
    return _estimate(workload, spec, gpus, gpn, inter_node_gbit_s, cal, suggest, efficiency)


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


def _setup(
    wl: Workload,
    spec: GpuSpec,
    gpus: int,
    gpn: int,
    inter_gbit: float,
    cal: GpuCalibration | None,
    notes: list[str],
) -> tuple[Workload, int, MemoryEstimate, dict[str, float], Network, int, str]:
    """Checks and what training and inference share: (workload, dp, memory, breakdown bytes, network,
    nodes, interconnect)."""
    shard = wl.tensor_parallel * wl.pipeline_parallel
    if gpus % shard:
        raise EstimateError(
            f"{gpus} GPUs do not split into tensor × pipeline parallel = {shard}",
            hint="use a GPU count that is a multiple of tensor × pipeline parallel",
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
    breakdown_b = memory_breakdown_bytes_cached(wl, dp, _overheads(cal))
    per_gpu = sum(breakdown_b.values()) / BYTES_PER_GIB
    # the memory the driver reports (measured, published nvidia-smi total, or the datasheet): the
    # breakdown already holds the CUDA context and the allocator allowance (estimate.capacity)
    capacity_gib = gpu_memory(spec, cal).total_gib
    memory = MemoryEstimate(
        per_gpu_gib=per_gpu,
        capacity_gib=capacity_gib,
        fits=per_gpu <= capacity_gib,
        headroom_gib=capacity_gib - per_gpu,
        breakdown={k: v / BYTES_PER_GIB for k, v in breakdown_b.items()},
    )
    net = network_for(spec, gpn, inter_gbit)
    nodes = math.ceil(gpus / gpn)
    if gpus == 1:
        interconnect = "single GPU"
    else:
        interconnect = net.intra_kind + (
            f"; {inter_gbit:g} Gbit/s per node across {nodes} nodes" if nodes > 1 else ""
        )
    return wl, dp, memory, breakdown_b, net, nodes, interconnect


def _estimate(
    wl: Workload,
    spec: GpuSpec,
    gpus: int,
    gpn: int,
    inter_gbit: float,
    cal: GpuCalibration | None,
    suggest: bool,
    eff: EfficiencyModel | None = None,
) -> Estimate:
    if wl.is_training:
        return _estimate_training(wl, spec, gpus, gpn, inter_gbit, cal, suggest, eff)
    return _estimate_inference(wl, spec, gpus, gpn, inter_gbit, cal, suggest, eff)


def _suggestions(
    wl: Workload,
    spec: GpuSpec,
    gpus: int,
    gpn: int,
    inter_gbit: float,
    cal: GpuCalibration | None,
    memory: MemoryEstimate,
    suggest: bool,
    tps: float,
) -> tuple[Suggestion, ...]:
    if suggest and not memory.fits:
        from gpuwise.estimate.suggest import suggest_fixes

        return tuple(suggest_fixes(wl, spec, gpus, gpn, inter_gbit, cal, tps))
    return ()


def _estimate_training(
    wl: Workload,
    spec: GpuSpec,
    gpus: int,
    gpn: int,
    inter_gbit: float,
    cal: GpuCalibration | None,
    suggest: bool,
    eff: EfficiencyModel | None,
) -> Estimate:
    from gpuwise.estimate.measured import default_efficiency, workload_class

    notes = list(wl.notes)
    wl, dp, memory, _, net, nodes, interconnect = _setup(
        wl, spec, gpus, gpn, inter_gbit, cal, notes
    )
    m = wl.model
    seq = wl.effective_seq_len
    adapter = trainable_params(wl) if wl.task in ("lora", "qlora") else 0.0
    prec, prec_note = _compute_precision(wl, spec)
    if prec_note:
        notes.append(prec_note)
    peak = (
        spec.peak_tf32_tflops * 1e12
        if prec == "tf32" and spec.peak_tf32_tflops
        else peak_flops(spec, wl.precision)
    )
    fpt = training_flops_per_token(m, seq, wl.task, adapter)
    model = eff or default_efficiency()
    klass = workload_class(wl)
    factor, factor_basis = model.factor(spec.name, klass)
    parts, gb, basis = _train_parts(
        wl, spec, gpus, dp, cal, prec, factor, model.attention_factor, adapter
    )
    tokens_step = gb * (seq if m.arch != "cnn" else 1)
    compute = parts.compute_s
    calibrated = _mfu_compute(wl, spec, cal, adapter)
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
    comm, compute_b = _comm_and_bubble(wl, spec, dp, net, compute, gb)
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
        q = model.interval("pretraining-run" if whole_run else klass)
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
    if m.arch == "cnn" and not m.activation_mib_per_sample:
        notes.append("activation memory of this CNN is unknown to gpuwise and counted as 0")
    if wl.precision == "fp8":
        notes.append(
            "fp8: the blocks' linear layers run at the FP8 rate; attention, LM head and memory-bound work "
            "do not speed up; MFU is relative to the FP8 dense peak; weights and states as in bf16"
        )
    if wl.task == "qlora":
        notes.append(
            f"qlora: 4-bit dequantisation costs ×{QLORA_DEQUANT_FACTOR:.2f} of the LoRA step "
            "(LitGPT resource tables, median of 4 models)"
        )
    if m.is_transformer and seq >= 16384 and not memory.fits:
        notes.append(
            "long context: activations grow with sequence length per GPU; context parallelism (split "
            "the sequence across GPUs) and a chunked/fused cross-entropy shrink them, more data-parallel "
            "GPUs do not"
        )
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
        suggestions=_suggestions(wl, spec, gpus, gpn, inter_gbit, cal, memory, suggest, tps),
        inference=None,
        notes=tuple(notes),
        goodput=gput,
        wall_hours_p10=p10,
        wall_hours_p90=p90,
        step_parts=parts.as_dict() if calibrated is None else {},
    )


def _estimate_inference(
    wl: Workload,
    spec: GpuSpec,
    gpus: int,
    gpn: int,
    inter_gbit: float,
    cal: GpuCalibration | None,
    suggest: bool,
    eff: EfficiencyModel | None,
) -> Estimate:
    from gpuwise.estimate.measured import default_efficiency, workload_class

    notes = list(wl.notes)
    wl, dp, memory, breakdown_b, net, nodes, interconnect = _setup(
        wl, spec, gpus, gpn, inter_gbit, cal, notes
    )
    m = wl.model
    prec, prec_note = _compute_precision(wl, spec)
    if prec_note:
        notes.append(prec_note)
    peak = (
        spec.peak_tf32_tflops * 1e12
        if prec == "tf32" and spec.peak_tf32_tflops
        else peak_flops(spec, wl.precision)
    )
    model = eff or default_efficiency()
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
        _, _, _, bw, _ = _rates(wl, spec, cal, prec)
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
    inference, step = _inference(
        wl, spec, peak, mfu_c, cal, memory.capacity_gib * BYTES_PER_GIB, fixed, net, act_s
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
    p10 = p90 = None
    if wall is not None:
        q = model.interval(klass)
        if q is not None:
            p10, p90 = wall * q[0], wall * q[1]
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
        suggestions=_suggestions(wl, spec, gpus, gpn, inter_gbit, cal, memory, suggest, tps),
        inference=inference,
        notes=tuple(notes),
        goodput=1.0,
        wall_hours_p10=p10,
        wall_hours_p90=p90,
    )


def quick_estimate(
    wl: Workload, spec: GpuSpec, gpus: int, gpn: int, inter_gbit: float, cal: GpuCalibration | None
) -> Estimate:
    """An estimate without suggestions (used by the fix search)."""
    return _estimate(wl, spec, gpus, gpn, inter_gbit, cal, suggest=False)
