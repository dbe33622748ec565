"""Step-time parts of a training step, communication, and the inference prefill/decode model.

The formulas are described in :mod:`.steptime` and ``docs/estimate.md``; :mod:`.estimator` puts them
together into an :class:`~gpuwise.estimate.result.Estimate`.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

from gpuwise.errors import EstimateError
from gpuwise.estimate.calibration import GpuCalibration
from gpuwise.estimate.memory import (
    SELECTIVE_LAYER_EVERY,
    activation_bytes,
    kv_cache_bytes,
    layer_activation_bytes,
    trainable_params,
    weight_bytes_per_param,
)
from gpuwise.estimate.steptime import (
    ACTIVATION_TRAFFIC_PASSES,
    CNN_TRAIN_TRAFFIC_PASSES,
    DEFAULT_BANDWIDTH_FRACTION,
    FP8_CAST_BYTES,
    OPTIMIZER_TRAFFIC_BYTES,
    QLORA_DEQUANT_BYTES,
    StepParts,
    achievable_matmul,
    attention_efficiency,
)
from gpuwise.estimate.throughput import (
    PCIE_X16_GB_S,
    SELECTIVE_OP_MATMUL_SHARE,
    Network,
    allreduce_seconds,
    attention_flops_per_token,
    collective_latency_s,
    forward_flops_per_token,
    gradient_buckets,
    peak_flops,
    recompute_factor,
    training_flops_per_token,
)
from gpuwise.estimate.workload import DEFAULT_PRETRAIN_BATCH_TOKENS, Workload
from gpuwise.hardware import GpuSpec
from gpuwise.units import BYTES_PER_GIB

if TYPE_CHECKING:
    from gpuwise.estimate.model import ModelConfig
from gpuwise.estimate.result import InferenceEstimate


def calibrated_mfu(
    wl: Workload, gpu: GpuSpec, cal: GpuCalibration | None, adapter: float
) -> tuple[float, str] | None:
    """A calibrated MFU (measured by the user) for this workload, or None (the step-time model applies)."""
    m = wl.model
    seq = wl.effective_seq_len
    rf = recompute_factor(m, seq, wl.task, wl.grad_ckpt, adapter)
    rc = "" if rf == 1.0 else f"; × {rf:.2f} for {wl.grad_ckpt} recompute"
    if cal is not None and wl.is_training:
        runs = cal.measured_for(m.name, wl.task)  # `gpuwise calibrate --from-runs`
        if runs is not None and runs.mfu is not None:
            return (
                runs.mfu * rf,
                f"calibrated: MFU {runs.mfu:.0%} measured in {len(runs.runs)} run"
                f"{'s' if len(runs.runs) != 1 else ''} of {m.name} {wl.task} on {gpu.name}{rc}",
            )
        by_model = cal.mfu_by_model.get(m.name.lower())
        if by_model is not None:
            return (
                by_model * rf,
                f"calibrated: measured MFU {by_model:.0%} for {m.name} on {gpu.name}{rc}",
            )
        if cal.mfu is not None:
            return cal.mfu * rf, f"calibrated: measured MFU {cal.mfu:.0%} on {gpu.name}{rc}"
    return None


def default_global_batch(wl: Workload, dp: int) -> int:
    if wl.global_batch is not None:
        # each data-parallel rank runs whole micro-batches: a step is micro_batch × dp × accumulation
        per_step = wl.micro_batch * dp
        return math.ceil(wl.global_batch / per_step) * per_step
    if wl.task == "pretrain" and wl.model.arch in ("decoder", "encoder-decoder", "encoder"):
        seqs = math.ceil(DEFAULT_PRETRAIN_BATCH_TOKENS / wl.effective_seq_len)
        per_step = wl.micro_batch * dp
        return max(per_step, math.ceil(seqs / per_step) * per_step)
    return wl.micro_batch * dp


def compute_precision(wl: Workload, spec: GpuSpec) -> tuple[str, str | None]:
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


def rates(
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


def train_parts(
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
    gb = default_global_batch(wl, dp)
    tokens = gb * (seq if m.arch != "cnn" else 1)
    tp, pp = wl.tensor_parallel, wl.pipeline_parallel
    tok_gpu = tokens / gpus
    mm, mm16, peak16, bw, basis = rates(wl, spec, cal, prec)
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
    cast = 0.0
    if prec == "fp8" and m.is_transformer:
        casts = FP8_CAST_BYTES[wl.float8_recipe]
        inputs, outputs = _linear_io_per_token(m)
        weights = (
            m.linear_params / (tp * pp) * tokens / (dp * wl.micro_batch * seq)
        )  # per micro-batch
        # a recomputed forward casts its inputs and weights again: all of it under full recompute,
        # every second block's under selective-layer, the unsaved matmuls' under selective-op
        again = {
            "full": 1.0,
            "selective-layer": 1.0 / SELECTIVE_LAYER_EVERY,
            "selective-op": SELECTIVE_OP_MATMUL_SHARE,
        }.get(wl.grad_ckpt, 0.0)
        cast = (
            casts.activation * (inputs + outputs) * tok_gpu
            + casts.weight * weights
            + again * (casts.activation * inputs * tok_gpu + casts.weight_forward * weights)
        ) / bw
    dequant = 0.0
    if wl.task == "qlora":  # per micro-batch, per pass over the 4-bit base weights (see .steptime)
        passes = 2.0 + (1.0 if wl.grad_ckpt == "full" else 0.0)
        # micro-batches each GPU runs per step: tokens / (data-parallel copies x micro-batch tokens)
        micro_batches = tokens / (dp * wl.micro_batch * seq)
        base = m.linear_params / (tp * pp)
        dequant = passes * micro_batches * base * QLORA_DEQUANT_BYTES / bw
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
        fp8_cast_s=cast,
    )
    return parts, gb, basis


def _linear_io_per_token(m: ModelConfig) -> tuple[float, float]:
    """(input, output) elements of every block linear layer one token passes through, over all layers:
    q, k, v and the attention output; the MLP's up (and gate) and down projections, of the
    ``experts_per_token`` experts an MoE token is routed to. A float8 recipe casts each linear's input
    in the forward pass and its output gradient in the backward pass. Each linear is counted casting
    its own copy (q, k and v three times the same hidden state), as eager torchao does; torch.compile
    may merge identical casts, so this is an upper bound (by about 15% for a Llama block)."""
    h, q, kv, f = m.hidden, m.heads * m.d_head, m.n_kv * m.d_head, m.ffn
    n_attn = m.layers + 2 * m.decoder_layers
    n_mlp = (m.layers + m.decoder_layers) * max(1, m.experts_per_token)
    up = 2 if m.gated_mlp else 1
    inputs = n_attn * (3 * h + q) + n_mlp * (up * h + f)
    outputs = n_attn * (q + 2 * kv + h) + n_mlp * (up * f + h)
    return float(inputs), float(outputs)


BUBBLE_NOTE_SHARE = 0.2
"""A pipeline bubble at least this share of the compute time gets a note on how to shrink it."""


def _micro_batches(wl: Workload, dp: int, gb: int) -> float:
    return max(1.0, gb / (wl.micro_batch * dp))


def bubble_share(wl: Workload, dp: int, gb: int) -> float:
    """Idle pipeline time as a share of compute: ``(p-1)/(m·v)`` for ``m`` micro-batches per step
    (1F1B, interleaved with ``v`` model chunks per GPU; Narayanan et al. 2021, Sec. 2.2). The
    interleaved schedule needs at least ``p`` micro-batches (Megatron-Core: a multiple of ``p``);
    with fewer, ``v`` does not shrink the bubble."""
    p = wl.pipeline_parallel
    if p <= 1:
        return 0.0
    m = _micro_batches(wl, dp, gb)
    return (p - 1) / (m * (wl.virtual_pipeline if m >= p else 1))


def bubble_note(wl: Workload, dp: int, gb: int) -> str | None:
    """A note when the pipeline bubble is large: its share, and what would shrink it — the
    interleaved schedule (2 chunks per GPU up to one layer per chunk) when there are at least as
    many micro-batches as stages, more micro-batches per step in any case."""
    share = bubble_share(wl, dp, gb)
    if share < BUBBLE_NOTE_SHARE:
        return None
    p = wl.pipeline_parallel
    m = _micro_batches(wl, dp, gb)
    micro = max(1, round(m))
    v = wl.virtual_pipeline if m >= p else 1
    text = (
        f"pipeline bubble: (p-1)/(m·v) = ({p}-1)/({micro}·{v}) = {share:.0%}: the stages idle "
        f"{share:.0%} as long as they compute ({micro} micro-batch{'es' if micro != 1 else ''} "
        f"per step over {p} stages)"
    )
    # about one layer per chunk: the most chunks Workload accepts (p·v <= layers + 2, the first and
    # last stage may hold one layer less, as in Llama 3's 405B run)
    finest = (wl.model.total_layers + 2) // p
    if m < p:
        text += f"; an interleaved schedule needs at least {p} micro-batches per step"
    elif finest > v:
        low = 2 if v == 1 else finest
        text += (
            f"; an interleaved schedule (Megatron-Core's virtual pipeline, torchtitan's "
            f"Interleaved1F1B) would make it {share * v / low:.0%} with --virtual-pipeline {low}"
            + (
                f", {share * v / finest:.0%} with {finest} (about one layer per chunk)"
                if finest > low
                else ""
            )
        )
    return text + "; more micro-batches per step (a larger --global-batch) shrink it too"


def _data_parallel_comm(
    wl: Workload, dp: int, net: Network, compute: float, accum: float, grad_b: float
) -> float:
    """Exposed data-parallel communication of one step, α + n·β per collective
    (:func:`.throughput.collective_latency_s` and :func:`.throughput.allreduce_seconds`): ZeRO-3/FSDP
    gathers the weights block by block in every micro-batch's forward and backward and
    reduce-scatters the gradients (hidden behind the compute); DDP and ZeRO-1/2 reduce the gradients
    in the stack's buckets during the last micro-batch's backward. With ``shard_within_node`` the
    sharded traffic stays in the node and one gradient all-reduce per step crosses the network."""
    m = wl.model
    shard = wl.non_data_parallel
    dp_net = replace(net, gpus_per_node=max(1, net.gpus_per_node // shard))
    hsdp = wl.shard_within_node and wl.zero >= 1 and dp > dp_net.gpus_per_node
    group = min(dp, dp_net.gpus_per_node) if hsdp else dp
    trained = trainable_params(wl) / shard
    units = max(1.0, m.total_layers / wl.pipeline_parallel)  # FSDP wraps one unit per block
    if wl.zero >= 3:
        weights = m.total_params / shard * weight_bytes_per_param(wl)
        comm = 1.5 * allreduce_seconds(weights, group, dp_net) * accum
        lat = 2 * collective_latency_s("all-gather", group, dp_net)
        comm += units * (lat + collective_latency_s("reduce-scatter", group, dp_net)) * accum
        hidden_by = compute
    else:
        buckets = gradient_buckets(wl.stack, wl.zero, trained, grad_b, dp)
        comm = allreduce_seconds(trained * grad_b, group, dp_net)
        comm += buckets * collective_latency_s("all-reduce", group, dp_net)
        hidden_by = compute / accum * 2 / 3  # the last micro-batch's backward pass
    if hsdp:  # each GPU all-reduces its 1/group of the gradients with its peers on the other nodes
        nodes = dp // group
        cross = replace(
            dp_net, gpus_per_node=1, inter_node_gb_s=net.inter_node_gb_s / group, intra_kind="net"
        )
        comm += allreduce_seconds(trained * grad_b / group, nodes, cross)
        comm += units * collective_latency_s("all-reduce", nodes, cross)
    return comm - hidden_by


def comm_and_bubble(
    wl: Workload, gpu: GpuSpec, dp: int, net: Network, compute: float, gb: int
) -> tuple[float, float]:
    """(exposed communication seconds, compute seconds with the pipeline bubble) for one step."""
    m = wl.model
    seq = wl.effective_seq_len
    accum = _micro_batches(wl, dp, gb)
    if wl.pipeline_parallel > 1:
        # 1F1B bubble (p-1)/m, interleaved (p-1)/(v·m) (Narayanan et al. 2021, Sec. 2.2.1-2.2.2)
        compute *= 1 + bubble_share(wl, dp, gb)
    grad_b = 4.0 if wl.precision == "fp32" or wl.task == "lora" else 2.0
    comm = 0.0
    if dp > 1:
        comm = max(0.0, _data_parallel_comm(wl, dp, net, compute, accum, grad_b))
    if wl.tensor_parallel > 1 and m.is_transformer:
        act_b = 4.0 if wl.precision == "fp32" else 2.0
        tp_net = replace(net, gpus_per_node=max(net.gpus_per_node, 1))
        per = allreduce_seconds(
            wl.micro_batch * seq * m.hidden * act_b, wl.tensor_parallel, tp_net
        ) + collective_latency_s("all-reduce", wl.tensor_parallel, tp_net)
        comm += 4 * per * m.total_layers / wl.pipeline_parallel * accum
    if wl.expert_parallel > 1 and m.experts:
        # token dispatch and combine: 2 all-to-alls forward, 2 backward per MoE block of the tokens'
        # top-k copies (Megatron-Core alltoall dispatcher); a GPU sends (ep-1)/ep of them
        act_b = 4.0 if wl.precision == "fp32" else 2.0
        ep = wl.expert_parallel
        tokens = wl.micro_batch * seq / wl.context_parallel
        volume = tokens * m.experts_per_token * m.hidden * act_b * (ep - 1) / ep
        bw = (
            net.intra_node_gb_s
            if ep * wl.tensor_parallel <= net.gpus_per_node
            else net.inter_node_gb_s / max(1, net.gpus_per_node)
        )
        moe_layers = (m.layers - m.dense_layers) / wl.pipeline_parallel
        comm += 4 * volume / (bw * 1e9) * moe_layers * accum
    if wl.offload != "none":
        # ZeRO-Offload: 16-bit gradients down and weights up over PCIe each step; parameter
        # offload also brings the weights up for every forward and backward pass (FSDP CPUOffload)
        pcie = PCIE_X16_GB_S.get(gpu.pcie_gen or 4, 31.5) * 1e9
        per_gpu = (
            trainable_params(wl)
            / (wl.tensor_parallel * wl.pipeline_parallel)
            / (dp * wl.context_parallel)
        )
        passes = 2.0 + (2.0 * accum if wl.offload == "params" else 0.0)
        comm += passes * per_gpu * 2.0 / pcie
    return comm, compute


def inference_step(
    wl: Workload,
    gpu: GpuSpec,
    peak: float,
    mfu_c: float,
    cal: GpuCalibration | None,
    capacity_bytes: float,
    fixed_bytes: float,
    net: Network,
    act_s: float = 0.0,
    layer_overhead_s: float = 0.0,
) -> tuple[InferenceEstimate, float]:
    """Prefill and decode separately. Prefill is compute-bound (or reads the weights once, whichever
    is longer); a decode step reads the weights (the experts a batch routes to) and the KV cache at
    the achievable bandwidth, or computes, whichever is longer, plus the tensor-parallel all-reduces.
    Every forward pass also pays ``layer_overhead_s`` per layer: kernel launches and small kernels that
    neither roofline sees (fitted to measured serving rows, :func:`~gpuwise.estimate.measured.fit_layer_overhead`)."""
    m = wl.model
    passes = m.total_layers * layer_overhead_s if m.is_transformer else 0.0
    b, p, o = wl.micro_batch, wl.prompt_len, wl.output_len
    tp = wl.tensor_parallel * wl.pipeline_parallel
    if cal is not None and cal.memory_bandwidth_efficiency is not None:
        eff_bw = cal.memory_bandwidth_efficiency
        bw_basis = f"calibrated: {eff_bw:.0%} of the datasheet bandwidth"
    else:
        eff_bw = DEFAULT_BANDWIDTH_FRACTION
        bw_basis = (
            f"{eff_bw:.0%} of the datasheet bandwidth (assumed achievable; calibrate with "
            "`gpuwise bench --calibrate`)"
        )
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
        step = max(t_cmp, t_mem) + passes
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
    ttft = max(prefill_flops / (tp * peak * mfu_c), weights / bw) + passes
    if m.experts:  # a decode step reads the experts its batch routes to: at most all of them
        active = m.active_params * weight_bytes_per_param(wl) / tp
        weights = min(weights, active * b)
    kv_avg = kv_cache_bytes(wl) * (p + o / 2) / (p + o)
    t_mem = (weights + kv_avg) / bw
    t_cmp = b * forward_flops_per_token(m, p + o / 2) / (tp * peak * mfu_c)
    step = max(t_mem, t_cmp) + passes
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
