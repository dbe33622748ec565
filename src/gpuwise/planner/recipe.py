"""The plan file: the chosen option's recipe and the figures it expects (``plan --save``).

:func:`plan_file` turns one :class:`~gpuwise.planner.PlanOption` of a plan into a
:class:`~gpuwise.base.recipe.PlanFile`. The recipe is the workload the plan priced with the option's
searched settings applied; the expected figures are the estimator's for exactly that recipe on that
setup (the planner keeps hours and dollars, not step time or tokens per second, so the option is
estimated once more here, with the same network and calibration the ranking used).
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from gpuwise.base.recipe import Band, Expected, PlanFile, Recipe, plan_id_for
from gpuwise.base.version import __version__
from gpuwise.errors import PlanError

if TYPE_CHECKING:
    from gpuwise.estimate.calibration import Calibration
    from gpuwise.estimate.result import Estimate
    from gpuwise.estimate.workload import Workload
    from gpuwise.planner.values import Plan, PlanOption


def option_workload(workload: Workload, option: PlanOption) -> Workload:
    """``workload`` with the option's searched settings applied (what the job should run)."""
    s = option.settings or {}
    changes: dict[str, Any] = {}
    for key, name in (
        ("zero", "zero"),
        ("recompute", "grad_ckpt"),
        ("micro_batch", "micro_batch"),
        ("global_batch", "global_batch"),
        ("tensor_parallel", "tensor_parallel"),
    ):
        if s.get(key) is not None:
            changes[name] = s[key]
    return workload.with_changes(**changes) if changes else workload


def option_estimate(
    workload: Workload, option: PlanOption, plan: Plan, calibration: Calibration | None
) -> Estimate:
    """The estimator's figures for the option's recipe on the option's setup and network."""
    from gpuwise.estimate import estimate_workload
    from gpuwise.planner.network import given_network, instance_network

    given = plan.request.inter_node_gbit_s
    net = given_network(given) if given else instance_network(option.cloud, option.instance_type)
    return estimate_workload(
        option_workload(workload, option),
        option.gpu,
        option.total_gpus,
        gpus_per_node=option.gpu_count,
        inter_node_gbit_s=net.inter_node_gbit_s if option.nodes > 1 else None,
        calibration=calibration,
        suggest=False,
    )


def plan_file(
    plan: Plan,
    workload: Workload,
    *,
    option: PlanOption | None = None,
    calibration: Calibration | None = None,
    calibration_runs: tuple[str, ...] = (),
    now: dt.datetime | None = None,
) -> PlanFile:
    """The plan file for ``option`` (default: the winner). PlanError when the plan has no option."""
    chosen = option or plan.winner
    if chosen is None:
        raise PlanError(
            f"the plan has no option to save ({plan.reason or 'nothing met the constraints'})",
            hint="relax the deadline, budget or filters until `gpuwise plan` ranks an option",
        )
    est = option_estimate(workload, chosen, plan, calibration)
    wl = est.workload
    recipe = _recipe(wl, est, chosen)
    expected = _expected(est, chosen)
    notes = tuple(plan.assumptions)
    if chosen.interruption_source:
        notes += (f"spot interruptions: {chosen.interruption_source}",)
    return PlanFile(
        plan_id=plan_id_for(recipe, expected),
        recipe=recipe,
        expected=expected,
        created=(now or dt.datetime.now(dt.timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        gpuwise_version=__version__,
        catalog_as_of=chosen.price_as_of,
        calibration=_describe_calibration(calibration),
        calibration_runs=calibration_runs,
        notes=notes,
    )


def _recipe(wl: Workload, est: Estimate, o: PlanOption) -> Recipe:
    s = o.settings or {}
    seq = wl.effective_seq_len if wl.model.is_transformer else None
    gb = wl.global_batch
    tokens = est.total_tokens
    steps = (
        math.ceil(tokens / (gb * seq)) if tokens and gb and seq and wl.task != "inference" else None
    )
    adapters = wl.task in ("lora", "qlora")
    return Recipe(
        model=wl.model.name,
        task=wl.task,
        seq_len=seq,
        tokens=tokens,
        steps=steps,
        global_batch=gb,
        micro_batch=wl.micro_batch,
        accumulation=int(s.get("accumulation", 1)),
        data_parallel=est.data_parallel,
        zero=wl.zero,
        tensor_parallel=wl.tensor_parallel,
        pipeline_parallel=wl.pipeline_parallel,
        context_parallel=wl.context_parallel,
        expert_parallel=wl.expert_parallel,
        recompute=wl.grad_ckpt,
        precision=wl.precision,
        master_weights=wl.master_weights,
        optimizer=wl.optimizer,
        lora_rank=wl.lora_rank if adapters else None,
        lora_targets=wl.lora_targets if adapters else None,
        world_size=o.total_gpus,
        gpus_per_node=o.gpu_count,
        nodes=o.nodes,
        gpu=o.gpu,
        instance_type=o.instance_type,
        cloud=o.cloud,
        region=o.region,
        capacity_type="reserved" if o.billing.startswith("reserved") else o.billing,  # type: ignore[arg-type]
        settings_text=str(s.get("text", "")),
        model_config=asdict(wl.model),
    )


def _expected(est: Estimate, o: PlanOption) -> Expected:
    wall = est.wall_hours or 0.0
    # the estimator's range is a range of wall hours; speed scales inversely, step time with it
    lo = est.wall_hours_p10 / wall if est.wall_hours_p10 and wall else None
    hi = est.wall_hours_p90 / wall if est.wall_hours_p90 and wall else None
    tps = est.tokens_per_second / est.gpus if est.tokens_per_second else None
    cost_lo = o.cost_usd_p10 / o.cost_usd if o.cost_usd_p10 and o.cost_usd else None
    cost_hi = o.cost_usd_p90 / o.cost_usd if o.cost_usd_p90 and o.cost_usd else None
    return Expected(
        tokens_per_s_per_gpu=Band(tps, tps / lo if lo else None, tps / hi if hi else None)
        if tps
        else None,
        step_s=Band(
            est.step_time_s,
            est.step_time_s * lo if lo else None,
            est.step_time_s * hi if hi else None,
        ),
        peak_memory_gib_per_gpu=float(est.memory.per_gpu_gib),
        memory_capacity_gib=float(o.capacity_gib),
        hours=Band(
            o.hours, o.hours * cost_lo if cost_lo else None, o.hours * cost_hi if cost_hi else None
        ),
        cost_usd=Band(o.cost_usd, o.cost_usd_p10, o.cost_usd_p90),
        price_usd_per_hour=o.price_usd_per_hour,
        failure_free_hours=o.failure_free_hours,
        startup_hours=o.fixed_hours,
    )


def _describe_calibration(cal: Calibration | None) -> str | None:
    if cal is None:
        return None
    when = f", measured {cal.measured_at}" if cal.measured_at else ""
    return f"{cal.path} ({', '.join(sorted(cal.gpus)) or 'workload defaults only'}{when})"
