"""The workload spec: what is trained or served, how, and how much of it.

:class:`Workload` is a frozen value checked in ``__post_init__``; :func:`workload_from_options`
builds one from the strings people type (``"7B"``, ``"2e12"``). Where an option is left out the
default is stated on the field, and the estimate says which defaults it used.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from gpuwise.errors import EstimateError, InputError, check_choice, did_you_mean
from gpuwise.estimate.model import ModelConfig, resolve_model
from gpuwise.units import check_finite, parse_count

Task = Literal["pretrain", "finetune", "lora", "qlora", "inference"]
TrainPrecision = Literal["fp32", "fp16", "bf16", "fp8"]
Optimizer = Literal["adamw", "adamw8bit", "sgd", "adafactor"]
GradCkpt = Literal["none", "selective", "full", "selective-op", "selective-layer"]
LoraTargets = Literal["qv", "attn", "all-linear"]

TASKS: tuple[Task, ...] = ("pretrain", "finetune", "lora", "qlora", "inference")
PRECISIONS: tuple[TrainPrecision, ...] = ("fp32", "fp16", "bf16", "fp8")
OPTIMIZERS: tuple[Optimizer, ...] = ("adamw", "adamw8bit", "sgd", "adafactor")
GRAD_CKPT: tuple[GradCkpt, ...] = ("none", "selective", "full", "selective-op", "selective-layer")
"""``selective`` is Korthikanti et al.'s (Megatron: recompute the attention core only);
``selective-op`` and ``selective-layer`` are torchtitan's ``selective_ac_option = "op"`` (save the
matmul and attention outputs named in its policy, recompute the rest) and ``= "2"`` (full
recomputation of every second block); see :func:`gpuwise.estimate.memory.activation_bytes`."""
LORA_TARGETS: tuple[LoraTargets, ...] = ("qv", "attn", "all-linear")
RECOMPUTE_SEARCH: tuple[GradCkpt, ...] = ("none", "selective", "full")
"""The recompute modes a search tries, least recompute first: the planner's settings search, and
the measured rows whose source leaves recompute unstated."""

# Sanity bounds: beyond these a value is a typo, not a workload.
_MAX_TOKENS = 1e16  # ~600x Llama 3's 15.6T pretraining tokens
_MAX_BATCH = 1 << 24
_MAX_SEQ = 1 << 22
_MAX_GPUS = 1 << 20
# Chinchilla-optimal data for pretraining when no --tokens is given: ~20 tokens per parameter
# (Hoffmann et al. 2022, "Training Compute-Optimal LLMs", Table 3).
CHINCHILLA_TOKENS_PER_PARAM = 20.0
# Default pretraining global batch when none is given: 4M tokens (LLaMA, Touvron et al. 2023, Sec. 2.2
# and Table 2; Llama 2 used the same).
DEFAULT_PRETRAIN_BATCH_TOKENS = 4 * 1024 * 1024


def _choice(value: str, choices: tuple[str, ...], flag: str) -> str:
    v = value.strip().lower()
    if v not in choices:
        raise InputError(
            f"unknown {flag} {value!r}",
            hint=f"use one of {', '.join(choices)}",
            suggestions=did_you_mean(v, choices),
        )
    return v


@dataclass(frozen=True)
class Workload:
    """One training, fine-tuning or inference job, independent of the GPUs it runs on."""

    model: ModelConfig
    """The network (preset, config.json or --params)."""
    task: Task = "pretrain"
    """``pretrain`` and ``finetune`` train every weight; ``lora`` trains adapters on a 16-bit base,
    ``qlora`` on a 4-bit NF4 base with double quantisation; ``inference`` serves the model."""
    tokens: float | None = None
    """Training tokens (all epochs). Default: ``samples·seq_len·epochs``; for pretraining without
    samples, 20 tokens per parameter (Chinchilla)."""
    samples: float | None = None
    """Training samples (sequences or images) per epoch."""
    epochs: float = 1.0
    """Passes over ``samples``."""
    seq_len: int | None = None
    """Tokens per sequence. Default: the model's context, capped at 4096 (ViT: its patch count)."""
    micro_batch: int = 1
    """Sequences per GPU per forward/backward pass (for inference: concurrent sequences)."""
    global_batch: int | None = None
    """Sequences per optimizer step across all GPUs. Default: micro_batch × data-parallel GPUs
    (pretraining: ~4M tokens, as LLaMA)."""
    precision: TrainPrecision = "bf16"
    """Compute precision. 16-bit and fp8 mean mixed precision with fp32 master weights in training."""
    optimizer: Optimizer = "adamw"
    """Optimizer; sets the bytes of state per trainable parameter."""
    zero: int = 0
    """ZeRO stage (0 = DDP, 1 = shard optimizer, 2 = + gradients, 3 = + weights; FSDP full shard = 3)."""
    grad_ckpt: GradCkpt = "none"
    """Activation recomputation: none, selective (attention core), full (keep only layer inputs)."""
    lora_rank: int = 16
    """LoRA rank r (lora/qlora)."""
    lora_targets: LoraTargets = "all-linear"
    """Which linear layers get adapters (PEFT's default for Llama is ``qv``)."""
    tensor_parallel: int = 1
    """Tensor-parallel degree (Megatron-style, within a node)."""
    pipeline_parallel: int = 1
    """Pipeline-parallel degree (1F1B schedule)."""
    cpu_offload: bool = False
    """Keep optimizer states (and master weights) in CPU memory (ZeRO-Offload)."""
    fused_kernels: bool = False
    """Fused norm and cross-entropy kernels (flash-attn/Liger/Transformer Engine, llm-foundry's default
    ``fused_crossentropy``): a norm keeps only its 16-bit input and the loss needs no fp32 copy of the
    logits. False = Hugging Face eager (RMSNorm upcasts to fp32, cross-entropy on fp32 logits)."""
    sequence_parallel: bool = False
    """Megatron sequence parallelism with tensor parallelism: norms and dropout are split across the
    tensor-parallel GPUs too (Korthikanti et al. 2022, Sec. 4.2.2)."""
    flash_attention: bool | None = None
    """Fused attention that never stores the score matrix. None: the model's default."""
    flash_attention_version: Literal[1, 2] = 2
    """Generation of the fused-attention kernel: 2 = FlashAttention-2 or a kernel as fast (PyTorch SDPA,
    cuDNN/Transformer Engine fused attention); 1 = FlashAttention-1 and kernels of its time (its Triton
    port, which llm-foundry's ALiBi models ran as ``attn_impl: triton``): about half as fast
    (:data:`gpuwise.estimate.steptime.FLASH1_SLOWDOWN`). Ignored without flash attention."""
    prompt_len: int = 512
    """Inference: prompt tokens per sequence."""
    output_len: int = 256
    """Inference: generated tokens per sequence."""
    requests: float | None = None
    """Inference: sequences to serve in total (for hours); None = throughput only."""
    notes: tuple[str, ...] = field(default=(), compare=False)
    """Defaults that were filled in, said back to the user."""

    def __post_init__(self) -> None:
        check_choice(self.task, TASKS, "task")
        _choice(self.precision, PRECISIONS, "precision")
        _choice(self.optimizer, OPTIMIZERS, "optimizer")
        _choice(self.grad_ckpt, GRAD_CKPT, "grad_ckpt")
        _choice(self.lora_targets, LORA_TARGETS, "lora_targets")
        if type(self.flash_attention_version) is not int or self.flash_attention_version not in (
            1,
            2,
        ):
            raise InputError(
                f"flash_attention_version={self.flash_attention_version!r} is not 1 or 2",
                hint="give 2 (FlashAttention-2, PyTorch SDPA, cuDNN) or 1 (FlashAttention-1 era kernels)",
            )
        if self.zero not in (0, 1, 2, 3):
            raise InputError(
                f"zero={self.zero!r} is not a ZeRO stage",
                hint="give zero=0, 1, 2 or 3 (3 is FSDP full sharding)",
            )
        for name, value, hi in (
            ("tokens", self.tokens, _MAX_TOKENS),
            ("samples", self.samples, _MAX_TOKENS),
            ("requests", self.requests, _MAX_TOKENS),
        ):
            if value is not None:
                check_finite(value, name, strict=True, maximum=hi)
        if self.tokens is not None and self.samples is not None:  # tokens used to win silently
            raise InputError(
                "both tokens and samples given: the run's size is ambiguous",
                hint="give tokens, or samples (tokens = samples × seq_len × epochs), not both",
            )
        check_finite(self.epochs, "epochs", strict=True, maximum=1e6)
        for name, ivalue, hi in (
            ("seq_len", self.seq_len, _MAX_SEQ),
            ("micro_batch", self.micro_batch, _MAX_BATCH),
            ("global_batch", self.global_batch, _MAX_BATCH),
            ("lora_rank", self.lora_rank, 1 << 16),
            ("tensor_parallel", self.tensor_parallel, 1024),
            ("pipeline_parallel", self.pipeline_parallel, 1024),
            ("prompt_len", self.prompt_len, _MAX_SEQ),
            ("output_len", self.output_len, _MAX_SEQ),
        ):
            if ivalue is None:
                continue
            if not isinstance(ivalue, int) or isinstance(ivalue, bool) or ivalue < 1 or ivalue > hi:
                raise InputError(
                    f"{name}={ivalue!r} is not a whole number from 1 to {hi:,}",
                    hint=f"give a positive whole {name}",
                )
        if self.prompt_len + self.output_len > _MAX_SEQ:
            raise InputError(
                "prompt + output length is absurdly long",
                hint="give a shorter prompt_len or output_len",
            )
        m = self.model
        if self.task in ("lora", "qlora") and not m.is_transformer:
            raise EstimateError(
                f"task={self.task!r} needs a transformer; {m.name} is a {m.arch}",
                hint="use task='finetune', or a model with a transformer config",
            )
        if self.task == "qlora" and self.precision in ("fp32", "fp8"):
            raise EstimateError(
                "QLoRA computes in 16 bit on a 4-bit base",
                hint="use precision='bf16' (or 'fp16') with task='qlora'",
            )
        if (
            self.micro_batch
            and self.global_batch is not None
            and self.global_batch < self.micro_batch
        ):
            raise InputError(
                f"global_batch={self.global_batch} is smaller than micro_batch={self.micro_batch}",
                hint="the global batch is micro-batch × GPUs × accumulation steps",
            )
        if self.tensor_parallel > 1 and m.is_transformer and m.heads % self.tensor_parallel:
            raise EstimateError(
                f"tensor_parallel={self.tensor_parallel} does not divide {m.heads} heads",
                hint="pick a tensor-parallel degree that divides the head count",
            )
        if (
            self.pipeline_parallel > 1
            and m.is_transformer
            and self.pipeline_parallel > m.total_layers
        ):
            raise EstimateError(
                f"pipeline_parallel={self.pipeline_parallel} exceeds {m.total_layers} layers",
                hint="use at most one pipeline stage per layer",
            )
        seq = self.effective_seq_len
        if (
            m.learned_positions and seq > m.max_positions
        ):  # a learned position table has no row beyond it
            raise EstimateError(
                f"sequence length {seq} exceeds {m.name}'s {m.max_positions} positions",
                hint=f"give seq_len ≤ {m.max_positions}",
            )

    # -- derived ------------------------------------------------------------------------
    @property
    def is_training(self) -> bool:
        return self.task != "inference"

    @property
    def is_generative(self) -> bool:
        """The model generates tokens one by one (decoder, encoder-decoder); else one forward pass."""
        return self.model.arch in ("decoder", "encoder-decoder", "params-only")

    @property
    def input_len(self) -> int:
        """Inference: tokens a request feeds in (the prompt; a ViT's patches; 1 image for a CNN)."""
        m = self.model
        if m.arch == "vision-transformer":
            return m.image_tokens
        if m.arch == "cnn":
            return 1
        return self.prompt_len

    @property
    def effective_seq_len(self) -> int:
        """Sequence length in effect (training) or the context at the end of generation (inference)."""
        if self.task == "inference":
            return self.prompt_len + self.output_len if self.is_generative else self.input_len
        if self.seq_len is not None:
            return self.seq_len
        m = self.model
        if m.arch == "vision-transformer":
            return m.image_tokens
        if m.arch == "cnn":
            return 1
        return min(m.max_positions or 2048, 4096)

    @property
    def uses_flash_attention(self) -> bool:
        return self.model.flash_attention if self.flash_attention is None else self.flash_attention

    @property
    def total_tokens(self) -> float | None:
        """Training tokens over the whole run, or None when the run's size is not known."""
        if self.tokens is not None:
            return self.tokens
        if self.samples is not None:
            return self.samples * self.epochs * self.effective_seq_len
        if self.task == "pretrain":
            return CHINCHILLA_TOKENS_PER_PARAM * self.model.total_params
        return None

    def with_changes(self, **changes: object) -> Workload:
        """A copy with fields replaced (validated again)."""
        return replace(self, **changes)  # type: ignore[arg-type]


def _int_option(value: str | int | float | None, flag: str) -> int | None:
    if value is None:
        return None
    v = parse_count(value, flag) if isinstance(value, str) else float(value)
    check_finite(v, flag)
    if v != int(v):
        raise InputError(
            f"{flag}={value!r} is not a whole number", hint=f"give {flag} as a whole number"
        )
    return int(v)


def workload_from_options(
    *,
    model: str | None = None,
    params: str | float | None = None,
    task: str = "pretrain",
    tokens: str | float | None = None,
    samples: str | float | None = None,
    epochs: str | float = 1.0,
    seq_len: str | int | None = None,
    micro_batch: str | int | None = None,
    global_batch: str | int | None = None,
    precision: str = "bf16",
    optimizer: str = "adamw",
    zero: str | int = 0,
    grad_ckpt: str | None = None,
    lora_rank: str | int = 16,
    lora_targets: str = "all-linear",
    tensor_parallel: str | int = 1,
    pipeline_parallel: str | int = 1,
    cpu_offload: bool = False,
    flash_attention: bool | None = None,
    prompt_len: str | int = 512,
    output_len: str | int = 256,
    requests: str | float | None = None,
) -> Workload:
    """Build a :class:`Workload` from CLI-style values (``"7B"``, ``"2e12"``, ``"300k"``)."""
    n_params = parse_count(params, "params", allow_zero=False) if params is not None else None
    if n_params is not None:
        check_finite(n_params, "params", maximum=1e15)
    cfg = resolve_model(model, n_params)
    notes: list[str] = []
    if model is None:
        notes.append(
            f"shape assumed Llama-like for {cfg.name} (hidden {cfg.hidden}, "
            f"{cfg.layers} layers): give --model for exact activation memory"
        )
    t = _choice(task, TASKS, "task")
    if grad_ckpt is None:
        # QLoRA recipes checkpoint activations: QLoRA paper (Dettmers et al. 2023) Sec. 4 and PEFT's
        # prepare_model_for_kbit_training(use_gradient_checkpointing=True) default.
        grad_ckpt = "full" if t == "qlora" else "none"
        if t == "qlora":
            notes.append(
                "qlora: gradient checkpointing on (full), as QLoRA recipes do; --grad-ckpt none to change"
            )
    mb = _int_option(micro_batch, "micro_batch")
    return Workload(
        model=cfg,
        task=t,  # type: ignore[arg-type]
        tokens=parse_count(tokens, "tokens", allow_zero=False) if tokens is not None else None,
        samples=parse_count(samples, "samples", allow_zero=False) if samples is not None else None,
        epochs=parse_count(epochs, "epochs", allow_zero=False),
        seq_len=_int_option(seq_len, "seq_len"),
        micro_batch=mb if mb is not None else 1,
        global_batch=_int_option(global_batch, "global_batch"),
        precision=_choice(precision, PRECISIONS, "precision"),  # type: ignore[arg-type]
        optimizer=_choice(optimizer, OPTIMIZERS, "optimizer"),  # type: ignore[arg-type]
        zero=_int_option(zero, "zero") or 0,
        grad_ckpt=_choice(grad_ckpt, GRAD_CKPT, "grad_ckpt"),  # type: ignore[arg-type]
        lora_rank=_int_option(lora_rank, "lora_rank") or 0,
        lora_targets=_choice(lora_targets, LORA_TARGETS, "lora_targets"),  # type: ignore[arg-type]
        tensor_parallel=_int_option(tensor_parallel, "tensor_parallel") or 0,
        pipeline_parallel=_int_option(pipeline_parallel, "pipeline_parallel") or 0,
        cpu_offload=cpu_offload,
        flash_attention=flash_attention,
        prompt_len=_int_option(prompt_len, "prompt_len") or 0,
        output_len=_int_option(output_len, "output_len") or 0,
        requests=parse_count(requests, "requests", allow_zero=False)
        if requests is not None
        else None,
        notes=tuple(notes),
    )
