"""The workload and request options, defined once: name, kind, default, unit, help, and the stack
each default follows.

Everything that takes a workload reads this table: :func:`gpuwise.estimate.workload_from_options`
(the library's request path), the typer flags of ``gpuwise estimate`` and ``gpuwise plan``
(generated from it in ``gpuwise.cli._workload``), the ``workload`` section of ``calibration.json``
(your stack's defaults) and the ``--json`` echo. A flag therefore means the same in every command,
with the same default and help.

Values are what a person types: counts as text (``"7B"``, ``"2e12"``), choices as words, switches
as booleans. :func:`resolve_options` fills the defaults (calibration file first, then this table)
and checks names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from gpuwise.errors import InputError, did_you_mean

OptionKind = Literal["text", "count", "int", "number", "choice", "switch", "gbps"]
OptionValue = Any
"""A value as typed (text, a switch, a number); the library also takes a ModelConfig for ``model``."""

WORKLOAD_PANEL = "Workload"
PARALLEL_PANEL = "Parallelism and memory"
INFERENCE_PANEL = "Inference"


@dataclass(frozen=True)
class OptionSpec:
    """One workload/request option."""

    name: str
    """Python name (``seq_len``); the flag is ``--seq-len``."""
    kind: OptionKind
    """``count``: a number with an optional suffix (7B, 300k); ``int``: a whole number (also 4k);
    ``number``: a real number; ``choice``: one of ``choices``; ``switch``: an on/off flag; ``text``:
    free text; ``gbps``: Gbit/s as a real number."""
    default: OptionValue
    """What applies when the option is left out (None: derived, as ``help`` says)."""
    help: str
    panel: str = WORKLOAD_PANEL
    choices: tuple[str, ...] = ()
    unit: str = ""
    """Unit of the value, when it has one (tokens, sequences, Gbit/s)."""
    follows: str = ""
    """Which stack and version the default follows, with its source."""
    metavar: str | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


_S = "sequences"
_MC = "Megatron-Core 0.9 / NeMo 2.0"

WORKLOAD_OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec(
        "model",
        "text",
        None,
        "Model preset (see --list-models), or a path to a Hugging Face config.json.",
    ),
    OptionSpec(
        "params",
        "count",
        None,
        "Parameter count when no --model is given, e.g. 7e9 or 7B (a Llama-like shape is assumed).",
        unit="parameters",
        metavar="COUNT",
    ),
    OptionSpec(
        "task",
        "choice",
        "pretrain",
        "pretrain | finetune | lora | qlora | inference.",
        choices=("pretrain", "finetune", "lora", "qlora", "inference"),
    ),
    OptionSpec(
        "tokens",
        "count",
        None,
        "Training tokens in total, e.g. 2e12 or 300B (pretrain default: 20 per parameter).",
        unit="tokens",
        follows="Chinchilla 20 tokens/parameter (Hoffmann et al. 2022, Table 3)",
        metavar="COUNT",
    ),
    OptionSpec(
        "samples",
        "count",
        None,
        "Training sequences (or images) per epoch, e.g. 50k; tokens = samples × seq-len × epochs.",
        unit=_S,
        metavar="COUNT",
    ),
    OptionSpec("epochs", "number", "1", "Passes over --samples.", metavar="NUMBER"),
    OptionSpec(
        "seq_len",
        "int",
        None,
        "Tokens per sequence (default: the model's context, at most 4096).",
        unit="tokens",
        metavar="N",
    ),
    OptionSpec(
        "micro_batch",
        "int",
        None,
        "Sequences per GPU per step (inference: concurrent sequences). Default 1.",
        unit=_S,
        metavar="N",
    ),
    OptionSpec(
        "global_batch",
        "int",
        None,
        "Sequences per optimizer step over all GPUs (default: micro-batch × data-parallel GPUs; "
        "pretrain: ~4M tokens).",
        unit=_S,
        follows="LLaMA / Llama 2: 4M tokens per batch (Touvron et al. 2023, Sec. 2.2)",
        metavar="N",
    ),
    OptionSpec(
        "precision",
        "choice",
        "bf16",
        "fp32 | fp16 | bf16 | fp8 (16-bit and fp8 train in mixed precision).",
        choices=("fp32", "fp16", "bf16", "fp8"),
        follows="bf16 autocast, the default of Megatron-Core, torchtitan and Hugging Face recipes",
    ),
    OptionSpec(
        "optimizer",
        "choice",
        "adamw",
        "adamw | adamw8bit | sgd | adafactor.",
        choices=("adamw", "adamw8bit", "sgd", "adafactor"),
    ),
    OptionSpec(
        "master_weights",
        "choice",
        "fp32",
        "Precision of the weights the optimizer updates: fp32 (mixed precision keeps an fp32 master "
        "copy) | bf16 (pure bf16: the 16-bit weights are updated in place, no copy).",
        panel=PARALLEL_PANEL,
        choices=("fp32", "bf16"),
        follows=f"fp32 master weights: {_MC} distributed optimizer, DeepSpeed bf16, PyTorch AMP",
    ),
    OptionSpec(
        "optimizer_states",
        "choice",
        "auto",
        "Precision of AdamW's moments: auto (as the master weights; 8-bit with adamw8bit) | fp32 | bf16.",
        panel=PARALLEL_PANEL,
        choices=("auto", "fp32", "bf16"),
        follows="torch.optim.AdamW keeps its states in the dtype of the weights it updates",
    ),
    OptionSpec("lora_rank", "int", "16", "LoRA rank r (lora/qlora).", metavar="N"),
    OptionSpec(
        "lora_targets",
        "choice",
        "all-linear",
        "Layers with adapters: qv | attn | all-linear.",
        choices=("qv", "attn", "all-linear"),
    ),
    OptionSpec(
        "zero",
        "int",
        "0",
        "ZeRO stage 0 | 1 | 2 | 3 (FSDP full sharding = 3).",
        panel=PARALLEL_PANEL,
        follows="0: plain data parallelism, PyTorch DDP and the Hugging Face Trainer default",
        metavar="N",
    ),
    OptionSpec(
        "grad_ckpt",
        "choice",
        None,
        "Activation recomputation: none | selective (Megatron) | selective-op | selective-layer "
        "(torchtitan) | full | auto (what the recipe does where it checkpoints by default, else "
        "the least recompute that fits or is tight) "
        "(default none; qlora except --stack lit-gpt, and finetune/lora with --stack hf: full).",
        panel=PARALLEL_PANEL,
        choices=("none", "selective", "full", "selective-op", "selective-layer", "auto"),
        follows="no recompute: the default of Megatron-Core and Hugging Face Trainer; "
        "QLoRA recipes checkpoint (PEFT prepare_model_for_kbit_training), and TRL's SFTConfig "
        "turns gradient_checkpointing on",
    ),
    OptionSpec(
        "tensor_parallel",
        "int",
        "1",
        "Tensor-parallel degree (within a node).",
        panel=PARALLEL_PANEL,
        metavar="N",
    ),
    OptionSpec(
        "sequence_parallel",
        "choice",
        "auto",
        "Megatron sequence parallelism (norms and dropout split over the tensor-parallel GPUs): "
        "auto (on with --tensor-parallel > 1) | on | off.",
        panel=PARALLEL_PANEL,
        choices=("auto", "on", "off"),
        follows=f"{_MC} recipes turn it on with tensor parallelism; torchtitan's TP plan shards the "
        "norms (SequenceParallel)",
    ),
    OptionSpec(
        "pipeline_parallel",
        "int",
        "1",
        "Pipeline-parallel degree.",
        panel=PARALLEL_PANEL,
        metavar="N",
    ),
    OptionSpec(
        "virtual_pipeline",
        "int",
        "1",
        "Model chunks per pipeline GPU (interleaved 1F1B): the bubble shrinks by this factor.",
        panel=PARALLEL_PANEL,
        follows=f"{_MC}: virtual_pipeline_model_parallel_size unset (no interleaving)",
        metavar="N",
    ),
    OptionSpec(
        "context_parallel",
        "int",
        "1",
        "Context-parallel degree: the sequence is split over this many GPUs (ring attention).",
        panel=PARALLEL_PANEL,
        follows=f"{_MC}: context_parallel_size 1",
        metavar="N",
    ),
    OptionSpec(
        "expert_parallel",
        "int",
        "1",
        "Expert-parallel degree (MoE): the routed experts are split over this many GPUs.",
        panel=PARALLEL_PANEL,
        follows=f"{_MC}: expert_model_parallel_size 1",
        metavar="N",
    ),
    OptionSpec(
        "cpu_offload",
        "switch",
        False,
        "Keep optimizer states in CPU memory (ZeRO-Offload); the same as --offload optimizer.",
        panel=PARALLEL_PANEL,
    ),
    OptionSpec(
        "offload",
        "choice",
        "none",
        "What lives in CPU memory: none | optimizer (states + master weights, ZeRO-Offload) | "
        "gradients (+ gradients) | params (+ weights: FSDP CPUOffload, ZeRO-3 offload_param).",
        panel=PARALLEL_PANEL,
        choices=("none", "optimizer", "gradients", "params"),
        follows="none: the default of FSDP (CPUOffload off) and DeepSpeed (offload_* unset)",
    ),
    OptionSpec(
        "flash_attention",
        "choice",
        "auto",
        "Fused attention that never stores the score matrix: auto | on | off "
        "(auto: on for modern models, off for GPT-2/BERT/T5 eager attention).",
        panel=PARALLEL_PANEL,
        choices=("auto", "on", "off"),
    ),
    OptionSpec(
        "attention_kernel",
        "choice",
        "flash2",
        "Fused-attention kernel generation: flash1 (FlashAttention-1 era, about half as fast) | "
        "flash2 (FlashAttention-2, PyTorch SDPA, cuDNN) | flash3 (FlashAttention-3, Hopper only).",
        panel=PARALLEL_PANEL,
        choices=("flash1", "flash2", "flash3"),
        follows="PyTorch 2.2+ SDPA flash backend (FlashAttention-2), used by torchtitan and "
        "Hugging Face sdpa",
    ),
    OptionSpec(
        "fused_kernels",
        "choice",
        "auto",
        "Fused norm and cross-entropy kernels: auto (on with --stack megatron or with tensor or "
        "pipeline parallelism, as Megatron-Core with Transformer Engine; off otherwise and with "
        "--stack torchtitan or hf, as plain PyTorch) | on | off.",
        panel=PARALLEL_PANEL,
        choices=("auto", "on", "off"),
        follows=f"{_MC} + Transformer Engine fuse norms and the vocab-parallel cross-entropy; "
        "Hugging Face Transformers 4.4x upcasts RMSNorm and the logits to fp32",
    ),
    OptionSpec(
        "stack",
        "choice",
        "unknown",
        "Training stack: unknown | megatron | torchtitan | llm-foundry | fms-fsdp | lit-gpt | "
        "deepspeed | hf. A stack gpuwise has measured rows from gets its own framework factor and "
        "gradient bucketing; unknown (and deepspeed, hf: no measured rows yet) get the central "
        "estimate of the measured stacks with the range of a stack never seen.",
        panel=PARALLEL_PANEL,
        choices=(
            "unknown",
            "megatron",
            "torchtitan",
            "llm-foundry",
            "fms-fsdp",
            "lit-gpt",
            "deepspeed",
            "hf",
        ),
    ),
    OptionSpec(
        "fp8_recipe",
        "choice",
        "auto",
        "fp8 training: how tensors are scaled and cast. auto (the stack's: tensorwise for "
        "torchtitan, te otherwise) | te (Transformer Engine, casts fused) | tensorwise | rowwise "
        "(PyTorch-native torchao float8, which casts every linear's input, weight and gradient).",
        panel=PARALLEL_PANEL,
        choices=("auto", "te", "tensorwise", "rowwise"),
        follows="torchtitan docs/float8.md: torchao Float8Linear with tensor-wise dynamic scales; "
        "NeMo/Megatron-Core and llm-foundry amp_fp8: Transformer Engine",
    ),
    OptionSpec(
        "shard_within_node",
        "switch",
        False,
        "Hybrid sharding (FSDP HYBRID_SHARD / HSDP): ZeRO shards only over the GPUs of a node, a copy "
        "per node, one gradient all-reduce across nodes per step.",
        panel=PARALLEL_PANEL,
        follows="off: FSDP FULL_SHARD and DeepSpeed ZeRO shard over every data-parallel GPU",
    ),
    OptionSpec(
        "prompt_len",
        "int",
        "512",
        "Prompt tokens per sequence.",
        panel=INFERENCE_PANEL,
        unit="tokens",
        metavar="N",
    ),
    OptionSpec(
        "output_len",
        "int",
        "256",
        "Generated tokens per sequence.",
        panel=INFERENCE_PANEL,
        unit="tokens",
        metavar="N",
    ),
    OptionSpec(
        "requests",
        "count",
        None,
        "Sequences to serve in total (for hours), e.g. 1M.",
        panel=INFERENCE_PANEL,
        unit=_S,
        metavar="COUNT",
    ),
)
"""The options of a :class:`~gpuwise.estimate.workload.Workload`, in the order help lists them."""

SETUP_OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec(
        "gpus_per_node",
        "int",
        None,
        "GPUs per node (default: the instance type's, else min(--gpus, 8)).",
        panel=PARALLEL_PANEL,
        metavar="N",
    ),
    OptionSpec(
        "inter_node_gbps",
        "gbps",
        None,
        "Network bandwidth per node in Gbit/s (default: the instance type's own, from gpuwise's "
        "network table; without an instance type, the usual for the GPU's generation).",
        panel=PARALLEL_PANEL,
        unit="Gbit/s",
        follows="the instance's row of gpuwise's network table; bare: the GPU's usual AWS instance "
        "(H100 p5.48xlarge 3200, A100 p4d 400, L4 g6.48xlarge 100, ...)",
        metavar="NUMBER",
    ),
)
"""How the GPUs are wired, shared by every command that estimates a setup (estimate, plan)."""

OPTIONS: dict[str, OptionSpec] = {o.name: o for o in (*WORKLOAD_OPTIONS, *SETUP_OPTIONS)}


def workload_defaults() -> dict[str, OptionValue]:
    """Option name → default, for every workload option."""
    return {o.name: o.default for o in WORKLOAD_OPTIONS}


def check_option_names(
    values: Mapping[str, object], where: str, specs: tuple[OptionSpec, ...] = WORKLOAD_OPTIONS
) -> None:
    """Raise InputError naming an unknown option (a typo must not fall back to a default)."""
    known = {o.name for o in specs}
    for name in values:
        if name not in known:
            raise InputError(
                f"{where}: unknown workload option {name!r}",
                hint="use the option names `gpuwise estimate --help` lists, with _ for -",
                suggestions=did_you_mean(name, known),
            )


def resolve_options(
    given: Mapping[str, OptionValue], stack_defaults: Mapping[str, OptionValue] | None = None
) -> dict[str, OptionValue]:
    """Every workload option's value: ``given`` first, then ``stack_defaults`` (the calibration
    file's ``workload`` section), then this table's default."""
    check_option_names(given, "workload")
    out = workload_defaults()
    if stack_defaults:
        out.update(stack_defaults)
    out.update(given)
    return out
