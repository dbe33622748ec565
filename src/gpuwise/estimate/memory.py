"""Memory per GPU, broken down: weights, gradients, optimizer states, master weights,
activations, logits, KV cache, communication buffers and runtime overhead.

Every term is a published formula, cited where it is computed. All functions return bytes;
the estimator converts to GiB. Time and FLOPs live in :mod:`.throughput`.

Model states (Rajbhandari et al. 2020, "ZeRO", Sec. 3.1 and Fig. 1): mixed-precision Adam keeps
2Ψ (16-bit weights) + 2Ψ (16-bit gradients) + KΨ with K = 12 (fp32 master weights, momentum,
variance). ZeRO-1 shards the K term over the data-parallel GPUs, ZeRO-2 also the gradients,
ZeRO-3 also the weights. Tensor and pipeline parallelism divide every model-state term.

Two departures from Korthikanti, both measured with ``benchmarks/estimate_memory.py``: RMSNorm as
Hugging Face implements it (eager, fp32 upcast) keeps ``(4 + 2)·h`` bytes per token instead of
``2·h``; fused attention keeps a 4-byte log-sum-exp per head and token.

Activations (Korthikanti et al. 2022, arXiv:2205.05198, Sec. 4, Table 2): per layer
``s·b·h·(34 + 5·a·s/h)`` bytes with 16-bit activations, broken down as attention ``11·sbh + 5·as²b``,
MLP ``19·sbh`` and two norms ``4·sbh``. We keep the same element counts but generalise them to
grouped-query attention (K and V are ``kv_heads/heads`` as wide), gated MLPs (SwiGLU stores the gate,
up, activation and product tensors: ``8·s·b·ffn`` bytes instead of ``4·s·b·ffn``; ``6·s·b·ffn`` fused), MLP widths other
than 4h, models without dropout (no 1-byte masks) and fused attention (FlashAttention never stores
the ``a·s²·b`` score terms; Dao et al. 2022, Sec. 3.1). Full recompute keeps ``2·sbh`` per layer
(the layer input) plus one layer being recomputed. With 1F1B pipelining the first stage holds about
``L`` layers' worth of activations whatever the pipeline degree (Korthikanti Sec. 4.2.3).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from gpuwise.estimate.model import ModelConfig
from gpuwise.estimate.workload import Workload

# Bytes per value.
_WEIGHT_BYTES = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 2.0}
"""Training keeps 16-bit weights for fp8 too: FP8 recipes (NVIDIA Transformer Engine) cast per
GEMM and keep higher-precision weights."""
_INFER_WEIGHT_BYTES = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0}
# Optimizer state bytes per trainable parameter (fp32 states), not counting master weights:
# AdamW m + v = 8 (ZeRO paper Sec. 3.1: K = 12 = 4 master + 4 m + 4 v);
# 8-bit AdamW 2 (Dettmers et al. 2022, "8-bit Optimizers via Block-wise Quantization", Sec. 2: two
# 8-bit states; block constants are <1%); SGD with momentum 4.
_OPTIMIZER_BYTES = {"adamw": 8.0, "adamw8bit": 2.0, "sgd": 4.0}
# QLoRA base weights: 4-bit NF4 plus double-quantised constants, 0.127 bits per parameter
# (Dettmers et al. 2023, "QLoRA", Sec. 3 "Double Quantization": 8/64 + 32/(64·256) = 0.127 bits).
QLORA_BITS_PER_PARAM = 4.0 + 0.127
# QLoRA's residual stream is fp32: PEFT's prepare_model_for_kbit_training "cast[s] all non INT8
# parameters to fp32" (huggingface/peft src/peft/utils/other.py); TRL's SFTTrainer then casts the
# embeddings and LM head back to bf16 (trl peft_module_casting_to_bf16), as the QLoRA reference code
# does, but keeps the norms in fp32. A Llama RMSNorm returns weight × normalised input, fp32 with an
# fp32 weight, and a bitsandbytes 4-bit layer returns its input's dtype, so from the first block on
# the residual additions — and each checkpointed block input — are fp32: 4 bytes per value.
QLORA_RESIDUAL_BYTES = 4.0
# Stacks whose QLoRA goes through PEFT's prepare_model_for_kbit_training (Hugging Face and the
# unknown stack, taken as Hugging Face for fine-tuning); LitGPT and others keep 16-bit norms.
_PEFT_STACKS = frozenset({"unknown", "hf"})
# DeepSpeed ZeRO-1/2 bucket defaults: reduce_bucket_size = allgather_bucket_size = 5e8 elements
# (deepspeed.ai/docs/config-json, "ZeRO optimizations").
_ZERO_BUCKET_ELEMENTS = 5e8


@dataclass(frozen=True)
class Overheads:
    """Runtime memory that no formula gives; both figures are assumptions unless calibrated."""

    cuda_context_gib: float = 0.5
    """CUDA context + cuBLAS/NCCL workspaces per process. Assumed 0.5 GiB (not a published
    figure); `gpuwise bench --calibrate` measures it and calibration.json overrides it."""
    allocator_fraction: float = 0.05
    """PyTorch caching-allocator fragmentation as a fraction of allocated memory. Assumed 5%
    (not a published figure); override in calibration.json."""


def weight_bytes_per_param(wl: Workload) -> float:
    return (_INFER_WEIGHT_BYTES if wl.task == "inference" else _WEIGHT_BYTES)[wl.precision]


def trainable_params(wl: Workload) -> float:
    """Parameters that get gradients and optimizer states."""
    if wl.task in ("lora", "qlora"):
        return _lora_params(wl.model, wl.lora_rank, wl.lora_targets)
    if wl.task == "inference":
        return 0.0
    return wl.model.total_params


@functools.lru_cache(maxsize=256)
def _lora_params(model: ModelConfig, rank: int, targets: str) -> float:
    # cached: the planner's settings search asks for the same model's adapters thousands of times
    return model.lora_params(rank, targets)


def adapter_bytes_per_param(wl: Workload) -> float:
    """LoRA adapter weight (and gradient) bytes. PEFT upcasts adapters to fp32 by default
    (``autocast_adapter_dtype=True``); the QLoRA reference code casts them to bf16 (artidoro/qlora
    ``qlora.py``: LoRA layers ``.to(torch.bfloat16)`` with ``--bf16``)."""
    return 2.0 if wl.task == "qlora" else 4.0


def _optimizer_bytes(wl: Workload) -> float:
    state = 4.0 if wl.optimizer_states == "fp32" else 2.0  # bytes per stored moment value
    if wl.optimizer == "adamw":
        return 2 * state  # momentum + variance
    if wl.optimizer == "sgd":
        return state  # momentum
    if wl.optimizer != "adafactor":
        return _OPTIMIZER_BYTES[wl.optimizer]
    # Adafactor without momentum keeps factored second moments: rows + cols fp32 values per
    # rows x cols matrix (Shazeer & Stern 2018, Sec. 3), i.e. 4·(1/rows + 1/cols) bytes per parameter.
    m = wl.model
    if wl.task in ("lora", "qlora"):
        return 4.0 * (1 / wl.lora_rank + 1 / max(m.hidden, 1))
    if not m.is_transformer:
        return 4.0  # upper bound: as if no tensor were factored
    return 4.0 * (1 / m.hidden + 1 / m.ffn)


def routed_expert_params(m: ModelConfig) -> float:
    """Parameters of the routed experts (all MoE blocks); 0 for a dense model."""
    if not m.experts:
        return 0.0
    return float(m.experts * m.mlp_params() * (m.layers - m.dense_layers))


def _per_gpu_params(wl: Workload, params: float, dp: int, sharded: bool) -> float:
    """``params`` of the whole model → per GPU: ÷ TP × PP, routed experts also ÷ EP, and ÷ the
    data-parallel group (× context parallel: Megatron-Core's distributed optimizer and FSDP2 shard
    over DP × CP) when ``sharded``. Experts shard over their own, EP times smaller, data-parallel
    group (Megatron-Core expert-data-parallel)."""
    m = wl.model
    shard = wl.tensor_parallel * wl.pipeline_parallel
    zdp = dp * wl.context_parallel if sharded else 1
    total = m.total_params
    experts = routed_expert_params(m) * params / total if total else 0.0
    dense = params - experts
    ep = wl.expert_parallel
    return dense / shard / zdp + experts / (shard * ep) / max(1.0, zdp / ep)


def _base_weights(wl: Workload) -> tuple[float, float]:
    """(parameters, bytes per parameter) of the model's own weights in training: QLoRA keeps the
    blocks' linear layers in 4 bit and the rest in 16 bit; otherwise the training weight dtype."""
    m = wl.model
    if wl.task == "qlora":
        quantized = m.linear_params * QLORA_BITS_PER_PARAM / 8
        rest = m.total_params - m.linear_params
        return m.total_params, (quantized + rest * qlora_unquantized_bytes(wl)) / m.total_params
    return m.total_params, _WEIGHT_BYTES[wl.precision]


def qlora_unquantized_bytes(wl: Workload) -> float:
    """Bytes per parameter of what QLoRA's 4-bit loader leaves unquantised (embeddings, norms, LM
    head): PEFT's prepare_model_for_kbit_training makes them fp32, and TRL and the QLoRA reference
    code cast embeddings and LM head back to bf16 only in a bf16 run (``args.bf16``), so an fp16
    run keeps them in fp32. Stacks without PEFT (LitGPT) keep the training dtype."""
    if wl.stack not in _PEFT_STACKS or wl.precision == "bf16":
        return 2.0
    return 4.0


def qlora_residual_bytes(wl: Workload, act_bytes: float) -> float:
    """Bytes per value of QLoRA's residual stream: fp32 where PEFT's fp32 norms make it so
    (:data:`QLORA_RESIDUAL_BYTES`), the activation dtype elsewhere."""
    return QLORA_RESIDUAL_BYTES if wl.task == "qlora" and wl.stack in _PEFT_STACKS else act_bytes


def model_state_bytes(wl: Workload, dp: int) -> dict[str, float]:
    """Weights, gradients, optimizer states and master weights per GPU (ZeRO paper Sec. 3.1, 5).

    ``master_weights="bf16"`` (pure bf16) keeps no fp32 copy and 16-bit gradients;
    ``optimizer_states="bf16"`` halves AdamW's moments. Offload (ZeRO-Offload, Ren et al. 2021, Sec. 4;
    FSDP ``CPUOffload``) moves optimizer states + master weights, then gradients, then weights to
    the CPU: only FSDP's gathered units stay (``comm_buffers``)."""
    m = wl.model
    if wl.task == "inference":
        return {
            "weights": _per_gpu_params(wl, m.total_params, dp, False) * weight_bytes_per_param(wl)
        }
    base_params, base_b = _base_weights(wl)
    z = wl.zero
    train_all = trainable_params(wl)
    mixed = wl.precision != "fp32"
    adapter = wl.task in ("lora", "qlora")
    adapter_b = adapter_bytes_per_param(wl)
    grad_b = adapter_b if adapter else (2.0 if mixed else 4.0)
    weights = _per_gpu_params(wl, base_params, dp, z >= 3) * base_b
    if adapter:
        weights += _per_gpu_params(wl, train_all, dp, z >= 3) * adapter_b
    grads = _per_gpu_params(wl, train_all, dp, z >= 2) * grad_b
    train_z1 = _per_gpu_params(wl, train_all, dp, z >= 1)
    opt = train_z1 * _optimizer_bytes(wl)
    # fp32 master copy: only when the working weights are 16 bit and the recipe keeps one (not for
    # fp32 runs, not for fp32 LoRA adapters, not for pure-bf16 training).
    master = train_z1 * 4.0 if mixed and not adapter and wl.master_weights == "fp32" else 0.0
    if wl.offload != "none":
        opt = master = 0.0
    if wl.offload in ("gradients", "params"):
        grads = 0.0
    if wl.offload == "params":
        weights = 0.0
    return {
        "weights": weights,
        "gradients": grads,
        "optimizer_states": opt,
        "master_weights": master,
    }


def layer_activation_bytes(
    m: ModelConfig,
    s: int,
    b: int,
    *,
    tp: int = 1,
    flash: bool = True,
    act_bytes: float = 2.0,
    cross_attention: bool = False,
    fused: bool = False,
    sequence_parallel: bool = False,
) -> float:
    """Activation bytes one transformer block keeps for backward (Korthikanti et al. 2022, Table 2,
    generalised; see the module docstring). Tensor parallelism without sequence parallelism
    splits the attention/MLP internals but not the norms, inputs and masks (``10 + 24/t`` form);
    with sequence parallelism everything is split (``34/t``). ``fused``: a fused norm kernel keeps
    only its 16-bit input (the ``4·sbh`` of Korthikanti's 34), and a fused SwiGLU three of the four
    gated-MLP tensors."""
    h, f, q = m.hidden, m.ffn, m.heads * m.d_head
    kvw = m.n_kv * m.d_head
    k = act_bytes / 2  # Korthikanti counts 2-byte activations; masks stay 1 byte
    mask = 1.0 if m.dropout else 0.0
    # attention: qkv input 2h, Q 2q, K and V 2kvw each, attention output (proj input) 2q, dropout mask h
    attn = k * 2 * h + k * (2 * q + 4 * kvw + 2 * q) / tp + mask * h
    scores = 0.0
    if not flash:  # softmax output 2·a·s (per token) + dropout mask a·s + dropout output 2·a·s
        scores = m.heads * s * (k * 2 + (mask + k * 2 if m.dropout else 0.0)) / tp
    # a gated MLP keeps gate, up, act(gate) and their product (4·f values) unfused; a fused SwiGLU
    # keeps its input (gate and up) and its output only, recomputing the activation in backward
    # (Megatron-Core ``SwiGLUFunction`` saves only its input: NVIDIA/Megatron-LM
    # megatron/core/fusions/fused_bias_swiglu.py, commit b1030e9; the output is the next matmul's input)
    per_ffn = (2 * (3 if fused else 4) if m.gated_mlp else 4) * k / tp  # bytes per ffn unit
    mlp_inner = per_ffn * f
    topk = max(1, m.experts_per_token) if m.experts else 1
    mlp = (k * 2 * h + mlp_inner) * topk + mask * h
    if m.shared_intermediate:  # the shared expert sees every token
        mlp += k * 2 * h + per_ffn * m.shared_intermediate
    # LayerNorm (fused kernel) keeps its input; Hugging Face's eager RMSNorm (LlamaRMSNorm)
    # upcasts to fp32 and keeps that fp32 copy plus the normalised 16-bit tensor: (4 + bytes)·h.
    per_norm = act_bytes * h if m.norm == "layernorm" or fused else (4.0 + act_bytes) * h
    norms = 2 * per_norm
    if flash:  # FlashAttention / SDPA keep the fp32 log-sum-exp per head and token
        attn += 4.0 * m.heads / tp
    per_token = attn + scores + mlp + norms
    if cross_attention:  # T5 decoder block: a second attention block and a third norm
        per_token += attn + scores + per_norm
    if sequence_parallel and tp > 1:  # the parts TP left whole (inputs, norms, masks) are split too
        whole = k * 2 * h + mask * h + k * 2 * h * topk + mask * h + norms
        if cross_attention:
            whole += k * 2 * h + mask * h + per_norm
        per_token -= whole * (1 - 1 / tp)
    return float(s * b * per_token)


# torchtitan's layer-level selective AC default: ``selective_ac_option = "2"`` wraps every second
# transformer block in full checkpointing (torchtitan ``JobConfig`` default and
# ``parallelize_llama.py`` / ``activation_checkpoint.py``: ``ac_freq``).
SELECTIVE_LAYER_EVERY = 2


def selective_op_saved_bytes_per_token(
    m: ModelConfig, *, tp: int = 1, act_bytes: float = 2.0
) -> float:
    """Bytes per token one block keeps under torchtitan's op-level selective AC
    (``selective_ac_option = "op"``): its policy saves the outputs of ``aten.mm`` (except every
    second one, counted per block in forward order), of the scaled-dot-product-attention kernels and
    of reduce-scatter, and recomputes everything else (norms, activations, rotary, products)
    (torchtitan ``parallelize_llama.py`` ``_save_list`` / ``activation_checkpoint.py``
    ``_ops_sac_save``). A Llama block runs its matmuls as wq, wk, wv, wo, w1, w3, w2, so the
    1st, 3rd, 5th and 7th are saved: Q, V, the gate projection and the MLP output; plus the attention
    output and its fp32 log-sum-exp. The block's input is kept by the checkpoint itself (counted by
    the caller)."""
    q, kvw = m.heads * m.d_head, m.n_kv * m.d_head
    topk = max(1, m.experts_per_token) if m.experts else 1
    mlp = (act_bytes * m.ffn / tp) * topk + act_bytes * m.hidden
    if not m.gated_mlp:  # fc1, fc2: the 1st and 3rd block matmuls after wq/wk/wv/wo are fc1 only
        mlp = act_bytes * m.ffn / tp * topk
    attn = act_bytes * (q + kvw) / tp + act_bytes * q / tp + 4.0 * m.heads / tp
    return attn + mlp


def activation_bytes(wl: Workload, *, tp: int | None = None) -> float:
    """Activations of all blocks for one micro-batch, per GPU, for the recompute mode in effect."""
    m = wl.model
    b, s = wl.micro_batch, wl.effective_seq_len
    tp = tp or wl.tensor_parallel
    act_bytes = 4.0 if wl.precision == "fp32" else 2.0
    if m.arch == "cnn":
        return m.activation_mib_per_sample * 2**20 * b * (act_bytes / 4)
    if not m.is_transformer:
        return 0.0
    s = -(
        -s // wl.context_parallel
    )  # context parallelism: each GPU keeps its chunk of the sequence
    flash = wl.uses_flash_attention or wl.grad_ckpt == "selective"
    kw = {"fused": wl.uses_fused_kernels, "sequence_parallel": wl.uses_sequence_parallel}
    enc = layer_activation_bytes(m, s, b, tp=tp, flash=flash, act_bytes=act_bytes, **kw)
    dec = (
        layer_activation_bytes(
            m, s, b, tp=tp, flash=flash, act_bytes=act_bytes, cross_attention=True, **kw
        )
        if m.decoder_layers
        else 0.0
    )
    residual_bytes = qlora_residual_bytes(wl, act_bytes)
    layer_input = residual_bytes * s * b * m.hidden / (tp if wl.uses_sequence_parallel else 1)
    if wl.grad_ckpt == "full":
        # keep each layer's input (2·sbh, Korthikanti Table 2) and recompute one layer at a time
        return layer_input * m.total_layers + max(enc, dec)
    if wl.grad_ckpt == "selective-layer":
        # torchtitan selective_ac_option = "2" (its default): every second block fully recomputed,
        # the others keep everything; plus one block being recomputed in the backward pass.
        full_blocks = m.total_layers // SELECTIVE_LAYER_EVERY
        kept_whole = (enc * m.layers + dec * m.decoder_layers) * (
            1 - full_blocks / max(m.total_layers, 1)
        )
        return kept_whole + layer_input * full_blocks + max(enc, dec)
    if wl.grad_ckpt == "selective-op":
        per_token = selective_op_saved_bytes_per_token(m, tp=tp, act_bytes=act_bytes)
        saved = s * b * per_token * m.total_layers + layer_input * m.total_layers
        return saved + max(enc, dec) + 2 * act_bytes * s * b * m.hidden
    body = enc * m.layers + dec * m.decoder_layers
    # final norm input + output-projection input (Korthikanti Sec. 4.3: "output layer")
    return body + 2 * act_bytes * s * b * m.hidden


def logits_bytes(wl: Workload) -> float:
    """LM-head logits and loss at their peak, b·s·V values each. Unfused (Hugging Face, torchtitan:
    the logits are upcast to fp32 before ``cross_entropy``), the peak is the loss's backward: the
    log-softmax output autograd saved (fp32), the gradient nll_loss hands it (dense, fp32) and the
    gradient log-softmax writes (fp32) live at once — 12 bytes a value (PyTorch derivatives.yaml:
    ``log_softmax`` backward is ``_log_softmax_backward_data(grad, result, ...)``, it keeps its
    result, not its input). The forward's peak is lower: the 16-bit logits, their fp32 copy and the
    log-softmax output (2 + 4 + 4). A fused cross-entropy (``fused_kernels``) writes the gradient into
    the logits' own buffer and keeps no fp32 copy: b·s·V values in the compute dtype only."""
    m = wl.model
    if not m.has_lm_head or (m.arch == "encoder" and wl.task != "pretrain"):
        return 0.0
    act_bytes = 4.0 if wl.precision == "fp32" else 2.0
    seq = -(-wl.effective_seq_len // wl.context_parallel)
    values = wl.micro_batch * seq * m.vocab / wl.tensor_parallel
    if wl.uses_fused_kernels:
        return values * act_bytes
    return values * max(act_bytes + 4.0 + 4.0, 3 * 4.0)


def kv_cache_bytes(wl: Workload, batch: int | None = None) -> float:
    """KV cache: 2 (K and V) · bytes · layers · kv_heads · head_dim · context · batch
    (vLLM ``kv_cache_interface.py`` page size; grouped-query heads from the config)."""
    m = wl.model
    if not m.is_transformer or m.arch in ("encoder", "vision-transformer"):
        return 0.0
    kv_b = 1.0 if wl.precision == "fp8" else (4.0 if wl.precision == "fp32" else 2.0)
    heads = max(
        1.0, m.n_kv / wl.tensor_parallel
    )  # KV heads are split by TP, replicated below one per GPU
    # decoder-only: one self-attention cache per layer; encoder-decoder: self + cross per decoder layer
    layers = (2 * m.decoder_layers if m.decoder_layers else m.layers) / wl.pipeline_parallel
    ctx = wl.prompt_len + wl.output_len
    if (
        m.kv_lora_rank
    ):  # MLA caches the latent and the rotary key once per token, not K and V per head
        return kv_b * layers * (m.kv_lora_rank + m.rope_head_dim) * ctx * (batch or wl.micro_batch)
    return 2 * kv_b * layers * heads * m.d_head * ctx * (batch or wl.micro_batch)


def inference_activation_bytes(wl: Workload) -> float:
    """Transient activations of one layer during prefill plus last-position logits (fp32)."""
    m = wl.model
    if (
        not m.is_transformer
    ):  # upper bound: what training keeps (inference frees each layer's input sooner)
        return (
            m.activation_mib_per_sample
            * 2**20
            * wl.micro_batch
            * (1.0 if wl.precision == "fp32" else 0.5)
        )
    b, s = wl.micro_batch, wl.input_len
    act = 4.0 if wl.precision == "fp32" else 2.0
    width = 2 * m.hidden + (3 if m.gated_mlp else 1) * m.ffn / wl.tensor_parallel
    logits = b * m.vocab * 4.0 if wl.is_generative else 0.0
    return b * s * width * act + logits


# FSDP (ZeRO-3) inside a pipeline: torchtitan does not reshard a stage's weights after forward when
# pipelining ("to avoid per-microbatch all-gathers": pytorch/torchtitan torchtitan/models/llama3/
# parallelize.py, apply_fsdp, reshard_after_forward = not pp_enabled), and PyTorch's pipeline stage
# runs every micro-batch's backward with set_requires_gradient_sync(False) and
# set_reshard_after_backward(False), reducing only after the last one (pytorch/pytorch
# torch/distributed/pipelining/stage.py, backward_maybe_with_nosync). So each GPU holds its stage's
# weights gathered in bf16 (2 bytes) and their gradients unsharded in the fp32 reduce dtype (4 bytes;
# FSDP2 accumulates unsynced gradients in reduce_dtype) for the whole step. Only PyTorch stacks
# pipeline FSDP: Megatron-Core shards no weights (its distributed optimizer is ZeRO-1) and DeepSpeed's
# pipeline engine accepts ZeRO-1 only.
PIPELINED_FSDP_GRAD_BYTES = 4.0


def comm_buffer_bytes(wl: Workload, dp: int) -> float:
    """Communication buffers per GPU for data parallelism.

    - DDP (ZeRO 0): the gradient buckets are a second copy of the gradients unless
      ``gradient_as_bucket_view=True`` (PyTorch DDP docs, ``gradient_as_bucket_view``).
    - ZeRO-1/2: DeepSpeed's reduce and all-gather buckets, 5e8 elements each by default.
    - ZeRO-3 / FSDP: the all-gathered weights of the current and the prefetched unit (one block)
      and that unit's unsharded gradients before the reduce-scatter (FSDP docs: forward/backward
      prefetch; Zhao et al. 2023 "PyTorch FSDP", Sec. 3.2).
    - ZeRO-3 / FSDP under a pipeline (PyTorch's pipelining, as torchtitan runs it): the stage's
      weights stay gathered for the whole step and its gradients accumulate unsharded in fp32 until
      the last micro-batch's backward: every stage parameter in the weight dtype (experts split by
      expert parallelism) plus :data:`PIPELINED_FSDP_GRAD_BYTES` per trainable one.
    """
    # the data-parallel group: DP × CP (Megatron-Core's distributed optimizer and FSDP2 reduce and
    # shard over both; see _per_gpu_params)
    if dp * wl.context_parallel <= 1 or wl.task == "inference":
        return 0.0
    m, shard = wl.model, wl.tensor_parallel * wl.pipeline_parallel
    train = trainable_params(wl) / shard
    wb = _WEIGHT_BYTES[wl.precision]
    if wl.zero == 0:
        grad_b = (
            adapter_bytes_per_param(wl)
            if wl.task in ("lora", "qlora")
            else (4.0 if wl.precision == "fp32" else 2.0)
        )
        return train * grad_b
    if wl.zero in (1, 2):
        return 2 * min(_ZERO_BUCKET_ELEMENTS, train) * wb
    if wl.pipeline_parallel > 1 and wl.stack not in ("megatron", "deepspeed"):
        # the whole stage stays gathered (frozen weights too; experts split by EP) in the weight
        # dtype, and the trainable parameters' gradients accumulate unsharded in fp32
        base_params, base_b = _base_weights(wl)
        gathered = _per_gpu_params(wl, base_params, dp, False) * base_b
        grads = _per_gpu_params(wl, trainable_params(wl), dp, False) * PIPELINED_FSDP_GRAD_BYTES
        return gathered + grads
    unit = (
        max(m.layer_params(), m.vocab * m.hidden) if m.is_transformer else m.total_params
    ) / shard
    unit = min(unit, m.total_params / shard)
    return 2 * unit * wb + unit * wb


def memory_breakdown_bytes(
    wl: Workload, dp: int, overheads: Overheads = Overheads()
) -> dict[str, float]:
    """The full per-GPU breakdown in bytes, keyed by the names ``--json`` reports."""
    out = model_state_bytes(wl, dp)
    if wl.task == "inference":
        out["activations"] = inference_activation_bytes(wl)
        out["kv_cache"] = kv_cache_bytes(wl)
    else:
        out["activations"] = activation_bytes(wl)
        out["logits"] = logits_bytes(wl)
    out["comm_buffers"] = comm_buffer_bytes(wl, dp)
    allocated = sum(out.values())
    out["allocator_overhead"] = allocated * overheads.allocator_fraction
    out["cuda_context"] = overheads.cuda_context_gib * 2**30
    return out


@functools.lru_cache(maxsize=4096)
def _breakdown_cached(wl: Workload, dp: int, overheads: Overheads) -> dict[str, float]:
    return memory_breakdown_bytes(wl, dp, overheads)


def memory_breakdown_bytes_cached(
    wl: Workload, dp: int, overheads: Overheads = Overheads()
) -> dict[str, float]:
    """:func:`memory_breakdown_bytes`, memoised (a fresh copy each call): the planner's settings
    search asks for the same workload variants and data-parallel degrees on many GPU setups."""
    return dict(_breakdown_cached(wl, dp, overheads))
