"""What the Hugging Face and Lightning callbacks can apply of a plan, and what they cannot.

A framework's trainer owns its batch size, accumulation, precision and gradient checkpointing;
a callback can set some of them before training starts (which ones depends on the framework,
see :mod:`gpuwise.train.hf_callback` and :mod:`gpuwise.train.lightning_callback`). The rest of a
recipe — ZeRO/FSDP sharding, tensor/pipeline/context/expert parallelism, LoRA, master weights,
the optimizer — lives in the model code and the framework's strategy: the callbacks name it in
one WARNING line so nobody believes it was applied.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from gpuwise.base.recipe import PlanFile, Recipe

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FrameworkPlan:
    """The settings a framework trainer should run with, from a plan."""

    plan_id: str
    micro_batch: int
    """Per-device batch size."""
    accumulation: int
    """Gradient accumulation steps that keep the planned global batch on this world size."""
    precision: str
    """bf16, fp16, fp8 or fp32."""
    gradient_checkpointing: bool
    """True when the plan recomputes activations (selective or full)."""
    elsewhere: tuple[str, ...]
    """The recipe's settings no callback can apply (model code, strategy), in words."""


def framework_plan(plan: PlanFile, world_size: int) -> FrameworkPlan:
    """The plan for a trainer on ``world_size`` data-parallel processes."""
    r = plan.recipe
    accumulation = r.accumulation
    if r.global_batch is not None and world_size > 0:
        per_step = r.micro_batch * world_size
        if per_step and r.global_batch % per_step == 0:
            accumulation = max(r.global_batch // per_step, 1)
    return FrameworkPlan(
        plan.plan_id,
        r.micro_batch,
        accumulation,
        r.precision,
        r.recompute not in ("none", ""),
        _elsewhere(r),
    )


def _elsewhere(r: Recipe) -> tuple[str, ...]:
    out = []
    if r.zero:
        out.append(f"{r.sharding} (ZeRO {r.zero}: the strategy's)")
    for name, size in (
        ("tensor", r.tensor_parallel),
        ("pipeline", r.pipeline_parallel),
        ("context", r.context_parallel),
        ("expert", r.expert_parallel),
    ):
        if size > 1:
            out.append(f"{name} parallel {size}")
    if r.lora_rank is not None:
        out.append(f"LoRA rank {r.lora_rank} on {r.lora_targets or 'the planned layers'}")
    out.append(f"{r.master_weights} master weights")
    out.append(f"optimizer {r.optimizer}")
    return tuple(out)


def warn_not_applied(plan: FrameworkPlan, framework: str, differs: list[str]) -> None:
    """One WARNING line: what of the plan the callback could not apply."""
    parts = [*differs, *plan.elsewhere]
    log.warning(
        "gpuwise: plan %s, not applied by the %s callback (set it in your code): %s",
        plan.plan_id,
        framework,
        "; ".join(parts),
    )
