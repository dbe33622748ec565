"""The workload spec: what is trained or served, how, and how much of it.

:class:`Workload` is a frozen value checked in ``__post_init__``; :func:`workload_from_options`
builds one from the strings people type (``"7B"``, ``"2e12"``). Where an option is left out the
default is stated on the field, and the estimate says which defaults it used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Literal

from gpuwise.errors import EstimateError, InputError, check_choice, did_you_mean
from gpuwise.estimate.hf_config import resolve_model
from gpuwise.estimate.model import ModelConfig
from gpuwise.units import NUMBER_HINT, check_finite, parse_count

Task = Literal["pretrain", "finetune", "lora", "qlora", "inference"]
TrainPrecision = Literal["fp32", "fp16", "bf16", "fp8"]
Optimizer = Literal["adamw", "adamw8bit", "sgd", "adafactor"]
GradCkpt = Literal["none", "selective", "full", "selective-op", "selective-layer", "auto"]
LoraTargets = Literal["qv", "attn", "all-linear"]

TASKS: tuple[Task, ...] = ("pretrain", "finetune", "lora", "qlora", "inference")
PRECISIONS: tuple[TrainPrecision, ...] = ("fp32", "fp16", "bf16", "fp8")
OPTIMIZERS: tuple[Optimizer, ...] = ("adamw", "adamw8bit", "sgd", "adafactor")
GRAD_CKPT: tuple[GradCkpt, ...] = (
    "none",
    "selective",
    "full",
    "selective-op",
    "selective-layer",
    "auto",
)
"""``selective`` is Korthikanti et al.'s (Megatron: recompute the attention core only);
``selective-op`` and ``selective-layer`` are torchtitan's ``selective_ac_option = "op"`` (save the
matmul and attention outputs named in its policy, recompute the rest) and ``= "2"`` (full
recomputation of every second block); see :func:`gpuwise.estimate.memory.activation_bytes`.
``auto`` is resolved by the estimator to what the recipe does where the common recipe checkpoints
by default (:func:`recipe_recompute`), else to the least of :data:`AUTO_RECOMPUTE` under which the
configuration fits or is tight (a measured configuration taken as it ran)."""
Offload = Literal["none", "optimizer", "gradients", "params"]
OFFLOADS: tuple[Offload, ...] = ("none", "optimizer", "gradients", "params")
MasterWeights = Literal["fp32", "bf16"]
StatePrecision = Literal["fp32", "bf16"]
LORA_TARGETS: tuple[LoraTargets, ...] = ("qv", "attn", "all-linear")
Stack = Literal[
    "unknown", "megatron", "torchtitan", "llm-foundry", "fms-fsdp", "lit-gpt", "deepspeed", "hf"
]
STACKS: tuple[Stack, ...] = (
    "unknown",
    "megatron",
    "torchtitan",
    "llm-foundry",
    "fms-fsdp",
    "lit-gpt",
    "deepspeed",
    "hf",
)
"""Training stacks ``--stack`` names: NeMo/Megatron-Core, torchtitan, MosaicML llm-foundry, IBM
fms-fsdp, Lightning lit-gpt/LitGPT, DeepSpeed, Hugging Face Trainer/Accelerate; ``unknown``: none said."""
Fp8Recipe = Literal["auto", "te", "tensorwise", "rowwise"]
FP8_RECIPES: tuple[Fp8Recipe, ...] = ("auto", "te", "tensorwise", "rowwise")
"""``--fp8-recipe``: how fp8 training scales and casts its tensors. ``te``: NVIDIA Transformer Engine
(Megatron-Core/NeMo, llm-foundry's ``amp_fp8``), whose casts are fused into the neighbouring kernels;
``tensorwise`` and ``rowwise``: PyTorch-native float8 (torchao ``Float8Linear``, dynamic scaling per
tensor or per row), which casts every linear layer's input, weight and output gradient in kernels of
its own (:data:`gpuwise.estimate.steptime.FP8_CAST_BYTES`)."""
STACK_FP8_RECIPE: dict[str, Fp8Recipe] = {"torchtitan": "tensorwise"}
"""The fp8 recipe a stack runs when ``--fp8-recipe auto``: torchtitan swaps ``nn.Linear`` for torchao's
``Float8Linear`` with tensor-wise dynamic scales (pytorch/torchtitan docs/float8.md). Every other stack
gets ``te``, the recipe of the fp8 rows gpuwise is fitted on (NeMo/Megatron-Core and llm-foundry, both
Transformer Engine), and a note when the stack is not megatron or llm-foundry."""
TE_STACKS: frozenset[str] = frozenset({"megatron", "llm-foundry"})
FUSED_STACKS: frozenset[str] = frozenset({"megatron"})
"""Stacks that fuse norms and the loss whatever the parallelism: Megatron-Core builds its layers from
Transformer Engine modules (fused LayerNorm/RMSNorm) and computes the loss with its own
vocab-parallel cross-entropy, which works in place on the logits, with tensor parallelism or not."""
UNFUSED_STACKS: frozenset[str] = frozenset({"torchtitan", "hf"})
"""Stacks whose layers and loss are plain eager PyTorch: no fused kernels unless ``--fused-kernels on``.
torchtitan's loss is eager unless training is compiled (torchtitan compiles it with the model since
commit bbb1b61, April 2025; compile is off by default): pass ``--fused-kernels on`` for a compiled run.
LitGPT's chunked cross-entropy and fms-fsdp's compiled default are neither, so they keep the default."""


def recipe_recompute(task: str, stack: str) -> tuple[GradCkpt, str] | None:
    """(recompute, why) where the common recipe for ``task`` on ``stack`` checkpoints activations by
    default, else None. QLoRA recipes checkpoint: QLoRA paper (Dettmers et al. 2023) Sec. 4 and
    PEFT's ``prepare_model_for_kbit_training(use_gradient_checkpointing=True)`` default (LitGPT's
    QLoRA, which does not use PEFT, does not checkpoint: Lightning-AI/litgpt finetune/lora.py).
    Hugging Face TRL's SFTConfig turns gradient_checkpointing on by default (trl/trainer/sft_config.py:
    "Defaults to True instead of False"; the plain Trainer's default is off), so ``--stack hf``
    fine-tunes checkpoint too."""
    if task == "qlora" and stack != "lit-gpt":  # LitGPT's QLoRA does not checkpoint
        return "full", "qlora: gradient checkpointing on (full), as QLoRA recipes do"
    if stack == "hf" and task in ("finetune", "lora"):
        return "full", "--stack hf: gradient checkpointing on (full), TRL SFTConfig's default"
    return None


RECOMPUTE_SEARCH: tuple[GradCkpt, ...] = ("none", "selective", "full")
"""The recompute modes the planner's settings search tries, least recompute first."""
AUTO_RECOMPUTE: tuple[GradCkpt, ...] = (
    "none",
    "selective",
    "selective-op",
    "selective-layer",
    "full",
)
"""``grad_ckpt="auto"`` (a measured configuration taken as it ran), where no recipe default applies:
the least recompute that fits or is tight, in the order of the time each mode adds — Megatron's attention core, torchtitan's op-level
policy (0.38 of the matmuls + memory-bound work), every second block (half a forward), every block."""

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
    """Keep optimizer states (and master weights) in CPU memory (ZeRO-Offload); kept equal to
    ``offload != "none"``."""
    offload: Offload = "none"
    """What lives in CPU memory: ``optimizer`` (states + master weights: ZeRO-Offload), ``gradients``
    (also the gradients), ``params`` (also the weights: FSDP ``CPUOffload(offload_params=True)``,
    DeepSpeed ZeRO-3 ``offload_param``; needs ZeRO-3)."""
    fused_kernels: bool | None = None
    """Fused norm and cross-entropy kernels (flash-attn/Liger/Transformer Engine, llm-foundry's default
    ``fused_crossentropy``): a norm keeps only its 16-bit input and the loss needs no fp32 copy of the
    logits. False = Hugging Face eager (RMSNorm upcasts to fp32, cross-entropy on fp32 logits).
    None: on with tensor or pipeline parallelism (Megatron-Core with Transformer Engine), else off."""
    sequence_parallel: bool | None = None
    """Megatron sequence parallelism with tensor parallelism: norms and dropout are split across the
    tensor-parallel GPUs too (Korthikanti et al. 2022, Sec. 4.2.2). None: on with tensor parallelism
    (Megatron-Core/NeMo recipes; torchtitan's TP plan)."""
    context_parallel: int = 1
    """Context-parallel degree: each GPU of a group holds ``seq_len / context_parallel`` tokens of every
    sequence (Megatron-Core ring attention; torchtitan ``context_parallel_degree``)."""
    expert_parallel: int = 1
    """Expert-parallel degree: an MoE layer's routed experts are split over this many GPUs of the
    data-parallel group (Megatron-Core ``expert_model_parallel_size``)."""
    virtual_pipeline: int = 1
    """Model chunks per pipeline GPU (interleaved 1F1B, Narayanan et al. 2021, Sec. 2.2.2): the bubble
    is ``(p - 1) / (v·m)``."""
    master_weights: MasterWeights = "fp32"
    """Weights the optimizer updates: ``fp32`` (mixed precision keeps an fp32 master copy) or ``bf16``
    (pure bf16: updated in place, no copy; torchtune's full fine-tune recipes)."""
    optimizer_states: StatePrecision = "fp32"
    """Precision of AdamW's moments (momentum, variance); 8-bit with ``optimizer="adamw8bit"``."""
    flash_attention: bool | None = None
    """Fused attention that never stores the score matrix. None: the model's default."""
    flash_attention_version: Literal[1, 2, 3] = 2
    """Generation of the fused-attention kernel: 2 = FlashAttention-2 or a kernel as fast (PyTorch SDPA,
    cuDNN/Transformer Engine fused attention); 1 = FlashAttention-1 and kernels of its time (its Triton
    port, which llm-foundry's ALiBi models ran as ``attn_impl: triton``): about half as fast
    (:data:`gpuwise.estimate.steptime.FLASH1_SLOWDOWN`); 3 = FlashAttention-3 (Hopper only). Ignored
    without flash attention."""
    prompt_len: int = 512
    """Inference: prompt tokens per sequence."""
    output_len: int = 256
    """Inference: generated tokens per sequence."""
    requests: float | None = None
    """Inference: sequences to serve in total (for hours); None = throughput only."""
    stack: Stack = "unknown"
    """The training stack (:data:`STACKS`): its measured framework factor where gpuwise has rows from
    it, and its gradient bucketing; ``unknown`` gets the central estimate of all measured stacks with
    the range of a stack never seen."""
    fp8_recipe: Fp8Recipe = "auto"
    """fp8 training only (:data:`FP8_RECIPES`): ``auto`` = the stack's (:data:`STACK_FP8_RECIPE`)."""
    shard_within_node: bool = False
    """Hybrid sharding (FSDP ``HYBRID_SHARD``, HSDP; DeepSpeed ZeRO++ hpZ): ZeRO shards the states only
    over the GPUs of one node and keeps a copy per node; across nodes, one gradient all-reduce per step."""
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
            3,
        ):
            raise InputError(
                f"flash_attention_version={self.flash_attention_version!r} is not 1, 2 or 3",
                hint="give 2 (FlashAttention-2, PyTorch SDPA, cuDNN), 1 (FlashAttention-1 era kernels) "
                "or 3 (FlashAttention-3, Hopper)",
            )
        _choice(self.offload, OFFLOADS, "offload")
        _choice(self.master_weights, ("fp32", "bf16"), "master_weights")
        _choice(self.optimizer_states, ("fp32", "bf16"), "optimizer_states")
        if self.cpu_offload and self.offload == "none":  # the older switch means optimizer offload
            object.__setattr__(self, "offload", "optimizer")
        object.__setattr__(self, "cpu_offload", self.offload != "none")
        if self.offload == "params" and self.zero < 3 and self.task != "inference":
            raise EstimateError(
                "offload='params' needs sharded weights (FSDP / ZeRO-3)",
                hint="add zero=3, or offload='optimizer'",
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
            ("context_parallel", self.context_parallel, 1024),
            ("expert_parallel", self.expert_parallel, 1 << 16),
            ("virtual_pipeline", self.virtual_pipeline, 1024),
            ("prompt_len", self.prompt_len, _MAX_SEQ),
            ("output_len", self.output_len, _MAX_SEQ),
        ):
            if ivalue is None:
                continue
            if not isinstance(ivalue, int) or isinstance(ivalue, bool) or ivalue < 1 or ivalue > hi:
                raise InputError(
                    f"{name}={ivalue!r} is not a whole number from 1 to {hi:,}",
                    hint=f"give a whole number from 1 to {hi:,}, e.g. {name}=2",
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
        if self.stack == "deepspeed" and self.pipeline_parallel > 1 and self.zero >= 2:
            # DeepSpeed's pipeline engine refuses ZeRO-2/3 (deepspeed.ai "Pipeline Parallelism":
            # "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism")
            raise EstimateError(
                f"DeepSpeed's pipeline engine takes ZeRO stage 0 or 1, not {self.zero}",
                hint="use --zero 1 with --pipeline-parallel, or no pipeline with --zero 3",
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
        if self.expert_parallel > 1 and (not m.experts or m.experts % self.expert_parallel):
            raise EstimateError(
                f"expert_parallel={self.expert_parallel} does not divide {m.name}'s "
                f"{m.experts} routed experts",
                hint="expert parallelism needs an MoE model and a degree that divides its experts",
            )
        if self.virtual_pipeline > 1 and (
            self.pipeline_parallel == 1
            # Megatron-Core may count the embedding and the loss as one chunk each
            # (account_for_embedding/loss_in_pipeline_split)
            or self.pipeline_parallel * self.virtual_pipeline > max(m.total_layers, 1) + 2
        ):
            raise EstimateError(
                f"virtual_pipeline={self.virtual_pipeline} needs pipeline_parallel > 1 and at most "
                "one layer per model chunk",
                hint="give pipeline_parallel > 1, or virtual_pipeline=1",
            )
        seq = self.effective_seq_len
        if self.context_parallel > 1 and self.is_training and seq % self.context_parallel:
            raise EstimateError(
                f"context_parallel={self.context_parallel} does not divide the sequence of {seq} tokens",
                hint="pick a context-parallel degree that divides seq_len",
            )
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
    def uses_sequence_parallel(self) -> bool:
        if self.sequence_parallel is None:
            return self.tensor_parallel > 1
        return self.sequence_parallel and self.tensor_parallel > 1

    @property
    def uses_fused_kernels(self) -> bool:
        """Fused norm, SwiGLU and cross-entropy kernels: as given, else Megatron's (the stack that
        model parallelism usually means) — but not on stacks built from plain PyTorch modules, whose
        loss upcasts the logits to fp32 (pytorch/torchtitan torchtitan/components/loss.py,
        cross_entropy_loss: ``cross_entropy(pred.flatten(0, 1).float(), ...)``)."""
        if self.fused_kernels is None:
            if self.stack in UNFUSED_STACKS:
                return False
            if self.stack in FUSED_STACKS:
                return True
            return self.tensor_parallel > 1 or self.pipeline_parallel > 1
        return self.fused_kernels

    @property
    def float8_recipe(self) -> Fp8Recipe:
        """The fp8 recipe in use: as given, else the stack's (``te`` where the stack has none known)."""
        if self.fp8_recipe != "auto":
            return self.fp8_recipe
        return STACK_FP8_RECIPE.get(self.stack, "te")

    @property
    def non_data_parallel(self) -> int:
        """Tensor × pipeline × context parallel: the GPUs that are not data-parallel copies."""
        return self.tensor_parallel * self.pipeline_parallel * self.context_parallel

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
    """A whole number ≥ 0 (``2``, ``8k``); the error names ``flag=value``, which the CLI writes as
    its flag, and says what to give (not the token parser's "7B")."""
    if value is None:
        return None
    try:
        v = parse_count(value, flag) if isinstance(value, str) else float(value)
    except InputError:
        v = math.nan
    if not math.isfinite(v) or v < 0 or v != int(v):
        raise InputError(
            f"{flag}={value!r} is not a whole number ≥ 0",
            hint=f"give a whole number, e.g. {flag}=2",
        ) from None
    return int(v)


_SWITCHES = {"auto": None, "on": True, "off": False}


def _switch(value: object, name: str) -> bool | None:
    """``auto | on | off`` (or a bool / None from Python) → None / True / False."""
    if value is None or isinstance(value, bool):
        return value
    v = str(value).strip().lower()
    if v not in _SWITCHES:
        raise InputError(
            f"unknown {name} {value!r}",
            hint="use auto, on or off",
            suggestions=did_you_mean(v, _SWITCHES),
        )
    return _SWITCHES[v]


def _count_option(value: object, name: str) -> float | None:
    if value is None:
        return None
    return parse_count(value, name, allow_zero=False)  # type: ignore[arg-type]


def workload_from_options(**options: str | float | bool | ModelConfig | None) -> Workload:
    """Build a :class:`Workload` from option values as people type them (``"7B"``, ``"2e12"``,
    ``"300k"``, ``"on"``), named as in :data:`gpuwise.estimate.options.WORKLOAD_OPTIONS` (the one
    table the CLI flags are generated from). Options left out take that table's defaults."""
    from gpuwise.estimate.options import resolve_options

    o = resolve_options(options)
    params = o["params"]
    n_params = parse_count(params, "params", allow_zero=False) if params is not None else None
    if n_params is not None:
        check_finite(n_params, "params", maximum=1e15)
    model = o["model"]
    cfg = (
        model
        if isinstance(model, ModelConfig)  # a shape already read (the measured set, a planner)
        else resolve_model(None if model is None else str(model), n_params)
    )
    notes: list[str] = []
    if model is None:
        notes.append(
            f"shape assumed Llama-like for {cfg.name} (hidden {cfg.hidden}, "
            f"{cfg.layers} layers): give --model for exact activation memory"
        )
    t = _choice(str(o["task"]), TASKS, "task")
    grad_ckpt = o["grad_ckpt"]
    stack = _choice(str(o["stack"]), STACKS, "stack")
    if grad_ckpt is None:
        checkpointed = recipe_recompute(t, stack)
        grad_ckpt = checkpointed[0] if checkpointed else "none"
        if checkpointed:
            notes.append(f"{checkpointed[1]}; --grad-ckpt none to change")
    master = _choice(str(o["master_weights"]), ("fp32", "bf16"), "master_weights")
    states = _choice(str(o["optimizer_states"]), ("auto", "fp32", "bf16"), "optimizer_states")
    kernel = _choice(str(o["attention_kernel"]), ("flash1", "flash2", "flash3"), "attention_kernel")
    offload = _choice(str(o["offload"]), OFFLOADS, "offload")
    if o["cpu_offload"] and offload == "none":
        offload = "optimizer"
    mb = _int_option(o["micro_batch"], "micro_batch")

    def whole(name: str) -> int:
        return _int_option(o[name], name) or 0

    return Workload(
        model=cfg,
        task=t,  # type: ignore[arg-type]
        tokens=_count_option(o["tokens"], "tokens"),
        samples=_count_option(o["samples"], "samples"),
        epochs=parse_count(o["epochs"], "epochs", allow_zero=False, hint=NUMBER_HINT),
        seq_len=_int_option(o["seq_len"], "seq_len"),
        micro_batch=mb if mb is not None else 1,
        global_batch=_int_option(o["global_batch"], "global_batch"),
        precision=_choice(str(o["precision"]), PRECISIONS, "precision"),  # type: ignore[arg-type]
        optimizer=_choice(str(o["optimizer"]), OPTIMIZERS, "optimizer"),  # type: ignore[arg-type]
        zero=whole("zero"),
        grad_ckpt=_choice(str(grad_ckpt), GRAD_CKPT, "grad_ckpt"),  # type: ignore[arg-type]
        lora_rank=whole("lora_rank"),
        lora_targets=_choice(str(o["lora_targets"]), LORA_TARGETS, "lora_targets"),  # type: ignore[arg-type]
        tensor_parallel=whole("tensor_parallel"),
        pipeline_parallel=whole("pipeline_parallel"),
        context_parallel=whole("context_parallel"),
        expert_parallel=whole("expert_parallel"),
        virtual_pipeline=whole("virtual_pipeline"),
        sequence_parallel=_switch(o["sequence_parallel"], "sequence_parallel"),
        fused_kernels=_switch(o["fused_kernels"], "fused_kernels"),
        offload=offload,  # type: ignore[arg-type]
        master_weights=master,  # type: ignore[arg-type]
        optimizer_states=(master if states == "auto" else states),  # type: ignore[arg-type]
        flash_attention=_switch(o["flash_attention"], "flash_attention"),
        flash_attention_version=int(kernel[-1]),  # type: ignore[arg-type]
        prompt_len=whole("prompt_len"),
        output_len=whole("output_len"),
        requests=_count_option(o["requests"], "requests"),
        stack=stack,  # type: ignore[arg-type]
        fp8_recipe=_choice(str(o["fp8_recipe"]), FP8_RECIPES, "fp8_recipe"),  # type: ignore[arg-type]
        shard_within_node=_switch(o["shard_within_node"], "shard_within_node") or False,
        notes=tuple(notes),
    )
