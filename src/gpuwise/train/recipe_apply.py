"""A planned job runs what was planned, or refuses before its first step.

``gpuwise run --plan plan.json`` sets ``GPUWISE_PLAN`` for every worker; :func:`~gpuwise.train.
resilient` then reads the plan (:func:`~gpuwise.train.job_plan`) and, before any optimizer step:

- checks the world size, the data-parallel size and (where CUDA exists) the GPU model against
  the recipe;
- applies the accumulation that keeps the planned global batch
  (``global_batch ÷ (micro_batch × data-parallel size)``), unless the script passed its own
  ``grad_accum`` (a different one is a mismatch);
- checks the data loader's batch size against the planned micro-batch when ``run.batches()``
  starts (build the loader with ``batch_size=run.micro_batch``).

A mismatch is refused with one line and exit code 2 for the whole ``gpuwise run`` (not retried as
a crash), unless ``GPUWISE_ALLOW_PLAN_MISMATCH`` is set (``gpuwise run --allow-plan-mismatch``):
then training goes on and the run record lists every mismatch.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, replace
from typing import NoReturn

from gpuwise.base import settings
from gpuwise.base.recipe import PlanFile, Recipe
from gpuwise.errors import InputError

log = logging.getLogger(__name__)


class PlanMismatchError(InputError):
    """The job differs from the plan it was started with (and mismatches are not allowed)."""


@dataclass(frozen=True)
class Applied:
    """What a planned job runs with, and how it differs from the plan."""

    plan: PlanFile
    micro_batch: int
    """Sequences per GPU per forward/backward pass: the plan's (the loader should use it)."""
    accumulation: int
    """Micro-batches per optimizer step on each data-parallel rank, as the run applies it."""
    data_parallel: int
    """Data-parallel replicas of this run."""
    mismatches: tuple[str, ...] = ()
    """What differs from the plan (only non-empty when mismatches are allowed)."""

    @property
    def recipe(self) -> Recipe:
        return self.plan.recipe

    @property
    def global_batch(self) -> int:
        """Sequences per optimizer step as run: micro-batch × accumulation × replicas."""
        return self.micro_batch * self.accumulation * self.data_parallel


def mismatch_allowed() -> bool:
    """``GPUWISE_ALLOW_PLAN_MISMATCH`` (``gpuwise run --allow-plan-mismatch``)."""
    return settings.flag("GPUWISE_ALLOW_PLAN_MISMATCH")


def apply_plan(
    plan: PlanFile,
    *,
    world_size: int,
    dp_size: int,
    grad_accum: int | None,
    gpu_name: str | None,
    allow: bool,
) -> Applied:
    """Check this job against ``plan`` and work out the accumulation it runs with.

    ``grad_accum``: what the script passed to ``resilient()`` (None: not given, the plan's
    applies). ``gpu_name``: torch's name of this rank's GPU (None without CUDA: not checked).
    Raises :class:`PlanMismatchError` on a mismatch unless ``allow``."""
    r = plan.recipe
    found: list[str] = []
    if world_size != r.world_size:
        found.append(
            f"world size {world_size} is not the plan's {r.world_size} "
            f"({r.nodes} node(s) × {r.gpus_per_node} {r.gpu})"
        )
    elif dp_size != r.data_parallel:  # (with another world size, another replica count follows)
        found.append(f"{dp_size} data-parallel replica(s), the plan has {r.data_parallel}")
    if gpu_name is not None and not same_gpu(gpu_name, r.gpu):
        found.append(f"this GPU is {gpu_name!r}, the plan is for {r.gpu}")
    planned = _accumulation_for(r, dp_size)
    if planned is None:
        found.append(
            f"the planned global batch {r.global_batch} is not a multiple of micro-batch "
            f"{r.micro_batch} × {dp_size} replica(s)"
        )
        planned = r.accumulation
    accumulation = planned
    if grad_accum is not None and grad_accum != planned:
        found.append(f"grad_accum={grad_accum} was given, the plan runs {planned}")
        accumulation = grad_accum
    applied = Applied(plan, r.micro_batch, accumulation, dp_size, tuple(found))
    if found and not allow:
        refuse(applied)
    if found:
        log.warning("running plan %s with mismatches (allowed): %s", plan.plan_id, "; ".join(found))
    return applied


def check_micro_batch(applied: Applied, batch_size: int, allow: bool) -> Applied:
    """The data loader's batch size against the planned micro-batch (``run.batches()``)."""
    if batch_size == applied.micro_batch:
        return applied
    found = (
        f"the data loader's batch size is {batch_size}, the plan's micro-batch is "
        f"{applied.micro_batch}"
    )
    out = replace(applied, micro_batch=batch_size, mismatches=(*applied.mismatches, found))
    if not allow:
        refuse(replace(out, mismatches=(found,)))
    log.warning("running plan %s with a mismatch (allowed): %s", applied.plan.plan_id, found)
    return out


def refuse(applied: Applied) -> NoReturn:
    r = applied.recipe
    raise PlanMismatchError(
        f"this job does not run plan {applied.plan.plan_id}: " + "; ".join(applied.mismatches),
        hint=f"run it as planned (gpuwise run --plan ... --nnodes {r.nodes} --nproc-per-node "
        f"{r.gpus_per_node} on {r.gpu}, the loader's batch_size=run.micro_batch, no grad_accum), "
        "plan again for this machine, or pass --allow-plan-mismatch to train anyway",
    )


def _accumulation_for(r: Recipe, dp_size: int) -> int | None:
    """Accumulation that keeps the planned global batch on ``dp_size`` replicas (None: none does)."""
    if r.global_batch is None:
        return r.accumulation
    per_step = r.micro_batch * dp_size
    if per_step <= 0 or r.global_batch % per_step:
        return None
    return max(r.global_batch // per_step, 1)


def local_gpu_name(device_type: str) -> str | None:
    """torch's name of this process's GPU; None without CUDA (the GPU model is not checked)."""
    if device_type != "cuda":
        return None
    from gpuwise.train._torch import torch

    if not torch.cuda.is_available():
        return None
    return str(torch.cuda.get_device_name(torch.cuda.current_device()))


def same_gpu(device_name: str, planned: str) -> bool:
    """Whether torch's device name is the planned GPU model (by gpuwise's GPU table, else by name)."""
    from gpuwise.errors import HardwareError
    from gpuwise.hardware import find_gpu

    try:
        return find_gpu(device_name).name == find_gpu(planned).name
    except HardwareError:
        squash = re.compile(r"[^a-z0-9]")
        return squash.sub("", planned.lower()) in squash.sub("", device_name.lower())


def record_refusal(err: PlanMismatchError) -> None:
    """Leave a refused plan's line in this rank's progress file, so ``gpuwise run`` ends the run
    with exit code 2 (a usage error, not retried) whichever rank refused first. The caller raises
    the error on: the worker bootstrap (:mod:`gpuwise.train._worker`) prints it as one line and
    exits 2; a library never ends the process itself."""
    from gpuwise.train.progress import global_rank, run_dir, write_progress

    write_progress(
        run_dir(),
        rank=global_rank(),
        step=0,
        committed_step=None,
        exit_reason="usage",
        error=err.one_line(),
    )


def plan_for_run(
    *, world_size: int, dp_size: int, grad_accum: int | None, gpu_name: str | None
) -> Applied | None:
    """The plan of this job (``GPUWISE_PLAN``) checked and applied; None outside a planned job."""
    from gpuwise.train.plan import job_plan

    plan = job_plan()
    if plan is None:
        return None
    return apply_plan(
        plan,
        world_size=world_size,
        dp_size=dp_size,
        grad_accum=grad_accum,
        gpu_name=gpu_name,
        allow=mismatch_allowed(),
    )
