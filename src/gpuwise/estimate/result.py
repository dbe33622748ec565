"""What an estimate returns: :class:`Estimate` and its parts (memory, fixes, inference figures)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from gpuwise.estimate.workload import Workload


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
                "context_parallel": wl.context_parallel,
                "expert_parallel": wl.expert_parallel,
                "virtual_pipeline": wl.virtual_pipeline,
                "sequence_parallel": wl.uses_sequence_parallel,
                "cpu_offload": wl.cpu_offload,
                "offload": wl.offload,
                "master_weights": wl.master_weights if wl.is_training else None,
                "optimizer_states": ("8bit" if wl.optimizer == "adamw8bit" else wl.optimizer_states)
                if wl.is_training
                else None,
                "flash_attention": wl.uses_flash_attention,
                "flash_attention_version": wl.flash_attention_version
                if wl.uses_flash_attention
                else None,
                "attention_kernel": f"flash{wl.flash_attention_version}"
                if wl.uses_flash_attention
                else "eager",
                "fused_kernels": wl.uses_fused_kernels,
                "stack": wl.stack,
                "shard_within_node": wl.shard_within_node,
                "fp8_recipe": wl.float8_recipe
                if wl.precision == "fp8" and wl.is_training
                else None,
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
