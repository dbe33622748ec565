"""The small GPTs of the memory and throughput checks, the ``gpuwise estimate`` command for each,
and the arithmetic that puts estimate and measurement side by side.

Pure Python (no torch): the torch model that is measured lives in :mod:`gpuwise.bench.proof.model`.
The shapes are GPT-2's (Radford et al. 2019, table 2: 117M → 124M with the tied 50257-token
embedding, 345M → 355M); the estimator reads the same shape from a Hugging Face style
``config.json`` written by :func:`hf_config`, so both sides describe one model.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

Precision = Literal["fp32", "bf16"]
Recompute = Literal["none", "full"]
GIB = 1024**3


@dataclass(frozen=True)
class GptShape:
    """A GPT-2 shaped decoder: learned positions, pre-LayerNorm blocks, 4× MLP, tied embedding."""

    name: str
    """Short label, e.g. ``125M``."""
    hidden: int
    """Model width (``n_embd``)."""
    layers: int
    """Transformer blocks (``n_layer``)."""
    heads: int
    """Attention heads (``n_head``); must divide ``hidden``."""
    vocab: int = 50257
    """Vocabulary (GPT-2's BPE)."""
    max_seq_len: int = 1024
    """Learned positions (``n_positions``)."""

    def __post_init__(self) -> None:
        if (
            min(self.hidden, self.layers, self.heads, self.vocab, self.max_seq_len) < 1
            or self.hidden % self.heads
        ):
            raise ValueError(
                f"GPT shape {self.name}: sizes must be ≥ 1 and heads must divide hidden"
            )

    @property
    def params(self) -> int:
        """Exact parameter count of :func:`gpuwise.bench.proof.model.build_gpt` for this shape:
        token + position embeddings (the output head is tied to the token embedding), per block
        two LayerNorms (2h each), qkv (3h² + 3h), proj (h² + h), fc (4h² + 4h), out (4h² + h),
        and the final LayerNorm (2h)."""
        h = self.hidden
        block = (
            2 * 2 * h + (3 * h * h + 3 * h) + (h * h + h) + (4 * h * h + 4 * h) + (4 * h * h + h)
        )
        return self.vocab * h + self.max_seq_len * h + self.layers * block + 2 * h


GPT_125M = GptShape("125M", hidden=768, layers=12, heads=12)
GPT_350M = GptShape("350M", hidden=1024, layers=24, heads=16)


@dataclass(frozen=True)
class TrainConfig:
    """One training configuration measured on the GPU and estimated by ``gpuwise estimate``."""

    shape: GptShape
    precision: Precision
    """``fp32``, or ``bf16`` autocast over fp32 weights (mixed precision)."""
    recompute: Recompute
    """Activation recomputation: ``none`` or ``full`` (every block checkpointed)."""
    micro_batch: int
    """Sequences per step."""
    seq_len: int = 1024
    """Tokens per sequence."""

    def __post_init__(self) -> None:
        if self.micro_batch < 1 or not 1 <= self.seq_len <= self.shape.max_seq_len:
            raise ValueError(
                f"config {self.label}: micro-batch must be ≥ 1 and seq_len within 1..{self.shape.max_seq_len}"
            )

    @property
    def label(self) -> str:
        return (
            f"{self.shape.name} {self.precision} recompute={self.recompute} mb={self.micro_batch}"
        )

    @property
    def tokens_per_step(self) -> int:
        return self.micro_batch * self.seq_len


def configs(quick: bool = False) -> tuple[TrainConfig, ...]:
    """The configurations of the memory and throughput checks: both sizes, both precisions, both
    recompute settings and micro-batch 1 and 8, in 8 combinations (6 with ``quick``)."""
    full = (
        TrainConfig(GPT_125M, "fp32", "none", 1),
        TrainConfig(GPT_125M, "bf16", "none", 8),
        TrainConfig(GPT_125M, "bf16", "full", 8),
        TrainConfig(GPT_350M, "bf16", "none", 1),
        TrainConfig(GPT_350M, "fp32", "full", 8),
        TrainConfig(GPT_350M, "bf16", "full", 8),
        TrainConfig(GPT_125M, "fp32", "full", 1),
        TrainConfig(GPT_350M, "bf16", "none", 8),
    )
    return full[:6] if quick else full


def hf_config(shape: GptShape) -> dict[str, Any]:
    """A Hugging Face GPT-2 ``config.json`` for the shape, as ``gpuwise estimate --model`` reads it."""
    return {
        "model_type": "gpt2",
        "architectures": ["GPT2LMHeadModel"],
        "n_embd": shape.hidden,
        "n_layer": shape.layers,
        "n_head": shape.heads,
        "vocab_size": shape.vocab,
        "n_positions": shape.max_seq_len,
        "n_inner": None,
        "tie_word_embeddings": True,
    }


def estimate_args(config: TrainConfig, gpu: str, config_path: Path) -> list[str]:
    """Arguments after ``gpuwise`` for the estimate of one configuration on one GPU.

    No gradient accumulation (global batch = micro-batch), the fused attention that
    ``scaled_dot_product_attention`` uses, and no calibration file, so the figure is the
    estimator's own."""
    return [
        "estimate",
        "--model",
        str(config_path),
        "--task",
        "pretrain",
        "--precision",
        config.precision,
        "--optimizer",
        "adamw",
        "--grad-ckpt",
        config.recompute,
        "--micro-batch",
        str(config.micro_batch),
        "--global-batch",
        str(config.micro_batch),
        "--seq-len",
        str(config.seq_len),
        "--tokens",
        "1e9",
        "--flash-attention",
        "on",
        "--zero",
        "0",
        "--gpu",
        gpu,
        "--gpus",
        "1",
        "--no-calibration",
        "--json",
    ]


# Parts of the estimator's per-GPU total that torch.cuda.max_memory_allocated never sees: the CUDA
# context lives outside the caching allocator, and fragmentation shows in max_memory_reserved.
NOT_ALLOCATED = ("cuda_context", "allocator_overhead")


@dataclass(frozen=True)
class MemoryRow:
    """The estimator's memory beside the measured peak, for one configuration."""

    label: str
    estimate_total_gib: float
    """``memory.per_gpu_gib`` of ``gpuwise estimate --json``."""
    estimate_allocated_gib: float
    """The total less what the allocator does not count (CUDA context, allocator overhead)."""
    measured_allocated_gib: float
    """``torch.cuda.max_memory_allocated`` over training steps after warm-up."""
    measured_reserved_gib: float
    """``torch.cuda.max_memory_reserved`` (what the caching allocator holds)."""

    @property
    def error(self) -> float:
        """Signed relative error of the like-for-like figure: (estimate − measured) / measured;
        positive = the estimator over-predicts (safe side)."""
        return relative_error(self.estimate_allocated_gib, self.measured_allocated_gib)


def relative_error(estimate: float, measured: float) -> float:
    if measured <= 0:
        raise ValueError(f"measured value {measured} must be > 0")
    return (estimate - measured) / measured


def memory_row(
    label: str, estimate: dict[str, Any], peak_allocated_bytes: int, peak_reserved_bytes: int
) -> MemoryRow:
    """A row from ``gpuwise estimate --json``'s object and the measured byte counts."""
    memory = estimate["memory"]
    breakdown = memory.get("breakdown", {})
    total = float(memory["per_gpu_gib"])
    allocated = total - sum(float(breakdown.get(k, 0.0)) for k in NOT_ALLOCATED)
    return MemoryRow(label, total, allocated, peak_allocated_bytes / GIB, peak_reserved_bytes / GIB)


@dataclass(frozen=True)
class MemorySummary:
    """How far the estimator is off over all configurations."""

    rows: int
    mean_abs_error: float
    max_abs_error: float
    under_predicted: int
    """Configurations where the estimate is below the measured peak (an out-of-memory risk)."""


def summarize(rows: list[MemoryRow]) -> MemorySummary:
    if not rows:
        raise ValueError("no memory rows to summarize")
    errors = [abs(r.error) for r in rows]
    return MemorySummary(
        len(rows), sum(errors) / len(errors), max(errors), sum(r.error < 0 for r in rows)
    )
