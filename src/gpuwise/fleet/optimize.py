"""The reserved / spot / on-demand mix for a demand profile: :func:`plan_fleet`.

The MILP that picks the reservations is in :mod:`gpuwise.fleet.milp` (its model and why it is
small are in that module's docstring); this module builds the plan around it: commitments, the
per-GPU breakdown, cost per month, single-billing baselines, sensitivity and notes.

**Costs are over the profile's hours.** A 3-year reservation is costed at its hourly rate over the
profile (the profile is taken as representative of the whole term); its contract value over three
years is reported as ``commitment_usd``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from gpuwise.errors import InputError, PlanError
from gpuwise.fleet.demand import Demand
from gpuwise.fleet.milp import (
    _curve,
    _Dispatch,
    _monthly,
    _total,
    cost_curve,
    dispatch,
    solve,
    solve_uncapped,
)
from gpuwise.fleet.plan_values import (
    DEFAULT_SPOT_OVERHEAD,
    Commitment,
    FleetOptions,
    FleetPlan,
    GpuBreakdown,
    MonthCost,
    Scenario,
    Solution,
    resolve_spot_overhead,
)
from gpuwise.fleet.pricing import GpuPrices, ReservedOption
from gpuwise.units import HOURS_PER_YEAR

__all__ = [  # the optimizer's names, wherever they are defined
    "DEFAULT_SPOT_OVERHEAD",
    "Commitment",
    "FleetOptions",
    "FleetPlan",
    "GpuBreakdown",
    "MonthCost",
    "Scenario",
    "Solution",
    "cost_curve",
    "dispatch",
    "hourly_split",
    "plan_fleet",
    "solve",
    "solve_uncapped",
]


def _utilization(d: _Dispatch, hours: int) -> float | None:
    paid = float(d.reserved_gpus.sum()) * hours
    return float(d.reserved_used.sum()) / paid if paid > 0 else None


def _single_billing(
    demand: Demand, prices: Mapping[str, GpuPrices], options: FleetOptions
) -> dict[str, float | None]:
    od = sum(
        prices[g].on_demand.usd_per_gpu_hour * float(demand.total[i].sum())
        for i, g in enumerate(demand.gpus)
    )
    out: dict[str, float | None] = {"on-demand": od}
    spot = 0.0
    for i, g in enumerate(demand.gpus):
        p = prices[g]
        cap = options.spot_capacity_gpus.get(g, math.inf)
        need = float(demand.interruptible[i].max()) * (1 + options.overhead)
        if p.spot is None or float(demand.firm[i].sum()) > 0 or need > cap + 1e-9:
            spot = math.nan
            break
        spot += (
            p.spot.usd_per_gpu_hour * (1 + options.overhead) * float(demand.interruptible[i].sum())
        )
    out["spot"] = None if math.isnan(spot) else spot
    for term in (1, 3):
        total = 0.0
        for i, g in enumerate(demand.gpus):
            rates = [o.usd_per_gpu_hour for o in prices[g].reserved if o.term_years == term]
            peak = math.ceil(float(demand.total[i].max()) - 1e-9)
            if not rates:
                total = math.nan if peak > 0 else total
                if peak > 0:
                    break
                continue
            total += min(rates) * demand.hours * peak
        out[f"reserved-{term}y"] = None if math.isnan(total) or term not in options.terms else total
    return out


def _scenario(
    name: str,
    demand: Demand,
    prices: Mapping[str, GpuPrices],
    counts: Mapping[tuple[str, int], int],
    options: FleetOptions,
    reoptimize: bool,
) -> Scenario:
    d = dispatch(demand, prices, counts, options)
    cost = _total(d, demand.hours)
    od = _single_billing(demand, prices, options)["on-demand"] or 0.0
    re_cost: float | None = None
    if reoptimize:
        try:
            re_cost = solve(demand, prices, options).objective_usd
        except PlanError:
            re_cost = None
    return Scenario(
        name, cost, od, 1 - cost / od if od > 0 else 0.0, _utilization(d, demand.hours), re_cost
    )


def _with_spot_factor(prices: Mapping[str, GpuPrices], factor: float) -> dict[str, GpuPrices]:
    return {
        g: replace(
            p,
            spot=None
            if p.spot is None
            else replace(p.spot, usd_per_gpu_hour=p.spot.usd_per_gpu_hour * factor),
        )
        for g, p in prices.items()
    }


def plan_fleet(
    demand: Demand,
    prices: Mapping[str, GpuPrices],
    options: FleetOptions | None = None,
    *,
    sensitivity: bool = True,
) -> FleetPlan:
    """Choose reservations and the hourly spot/on-demand split for ``demand`` at ``prices``."""
    options = options or FleetOptions()
    missing = [g for g in demand.gpus if g not in prices]
    if missing:
        raise PlanError(
            f"no prices for {', '.join(missing)}", hint="price every GPU model in the demand"
        )
    unknown_caps = [g for g in options.spot_capacity_gpus if g not in demand.gpus]
    if unknown_caps:
        raise InputError(
            f"spot capacity given for {', '.join(unknown_caps)}, which is not in the demand",
            hint=f"the demand has {', '.join(demand.gpus)}",
        )
    options, overhead_source = resolve_spot_overhead(options, demand.gpus, prices)
    sol = solve(demand, prices, options)
    d = dispatch(demand, prices, sol.counts, options)
    cost = _total(d, demand.hours)
    singles = _single_billing(demand, prices, options)
    od_cost = singles["on-demand"] or 0.0
    feasible = {k: v for k, v in singles.items() if v is not None}
    best_name = min(feasible, key=lambda k: feasible[k])
    best_cost = feasible[best_name]
    commitments = _commitments(sol, prices, demand.hours)
    per_gpu, notes = _per_gpu(demand, prices, d, options)
    longest = max((c.term_years for c in commitments), default=0)
    extrapolated = longest * HOURS_PER_YEAR > demand.hours
    if extrapolated:
        notes.insert(
            0,
            f"extrapolated: a {longest}-year reservation is proposed from {_span(demand.hours)} of "
            "demand; its saving assumes this demand repeats for the whole term. Give a longer "
            "demand history" + (", or allow only 1-year terms" if longest > 1 else ""),
        )
    return FleetPlan(
        commitments=commitments,
        cost_usd=cost,
        on_demand_only_cost_usd=od_cost,
        savings_fraction=1 - cost / od_cost if od_cost > 0 else 0.0,
        best_single_billing=best_name,
        best_single_cost_usd=best_cost,
        savings_vs_best_single_fraction=1 - cost / best_cost if best_cost > 0 else 0.0,
        single_billing_costs_usd=singles,
        monthly=tuple(_monthly(demand, d)),
        reserved_utilization=_utilization(d, demand.hours),
        per_gpu=per_gpu,
        sensitivity=_sensitivity(demand, prices, sol.counts, options) if sensitivity else (),
        hours=demand.hours,
        spot_overhead=float(options.spot_overhead or 0.0),
        spot_overhead_source=overhead_source,
        solver=sol,
        notes=tuple(notes),
        extrapolated=extrapolated,
    )


def _commitments(
    sol: Solution, prices: Mapping[str, GpuPrices], hours: int
) -> tuple[Commitment, ...]:
    """The reservations to buy: cost over the profile's ``hours`` and contract value per term."""
    out = []
    for (gpu, i), n in sorted(sol.counts.items()):
        o: ReservedOption = prices[gpu].reserved[i]
        out.append(
            Commitment(
                gpu,
                o.cloud,
                o.term_years,
                n,
                o.usd_per_gpu_hour,
                o.discount,
                n * o.usd_per_gpu_hour * hours,
                n * o.usd_per_gpu_hour * HOURS_PER_YEAR * o.term_years,
                o.source,
            )
        )
    return tuple(out)


def _per_gpu(
    demand: Demand, prices: Mapping[str, GpuPrices], d: _Dispatch, options: FleetOptions
) -> tuple[tuple[GpuBreakdown, ...], list[str]]:
    """How each GPU model's demand is served, and what the user should know about its prices."""
    per_gpu = []
    notes: list[str] = []
    for g, gpu in enumerate(demand.gpus):
        p = prices[gpu]
        curve = _curve(p, options)
        dg = _Dispatch(
            d.reserved_used[g : g + 1],
            d.spot_gpu_hours[g : g + 1],
            d.on_demand[g : g + 1],
            d.spot_usd[g : g + 1],
            d.on_demand_usd[g : g + 1],
            d.reserved_usd_per_hour[g : g + 1],
            d.reserved_gpus[g : g + 1],
        )
        per_gpu.append(
            GpuBreakdown(
                gpu,
                float(demand.total[g].sum()),
                float(demand.firm[g].sum()),
                float(demand.total[g].max()),
                int(d.reserved_gpus[g]),
                float(d.reserved_used[g].sum()),
                _utilization(dg, demand.hours),
                float(d.spot_gpu_hours[g].sum()),
                float(d.on_demand[g].sum()),
                _total(dg, demand.hours),
                p.on_demand.usd_per_gpu_hour * float(demand.total[g].sum()),
                p.on_demand,
                p.spot if curve.spot_eff is not None else None,
                p.reserved_unavailable,
            )
        )
        if not p.reserved:
            notes.append(
                f"{gpu}: reserved billing unavailable — no known discount for "
                f"{', '.join(p.reserved_unavailable)}; set one in reserved.yaml or with "
                "--reserved-discount CLOUD:1y=FRACTION"
            )
        elif p.reserved_unavailable:
            notes.append(
                f"{gpu}: no reserved discount known for {', '.join(p.reserved_unavailable)} "
                "(those reservations were not considered)"
            )
        if p.spot is not None and curve.spot_eff is None:
            notes.append(
                f"{gpu}: spot with {options.overhead:.1%} interruption overhead is not "
                "cheaper than on-demand; spot not used"
            )
    return tuple(per_gpu), notes


def _sensitivity(
    demand: Demand,
    prices: Mapping[str, GpuPrices],
    counts: Mapping[tuple[str, int], int],
    options: FleetOptions,
) -> tuple[Scenario, ...]:
    """Demand ±20% (re-optimized too) and spot price +25/50/100%, the commitments kept."""
    scenarios = [
        _scenario(
            f"demand {factor - 1:+.0%}",
            demand.scaled(factor),
            prices,
            counts,
            options,
            reoptimize=True,
        )
        for factor in (0.8, 1.2)
    ]
    scenarios += [
        _scenario(
            f"spot price {factor - 1:+.0%}",
            demand,
            _with_spot_factor(prices, factor),
            counts,
            options,
            reoptimize=False,
        )
        for factor in (1.25, 1.5, 2.0)
    ]
    return tuple(scenarios)


def _span(hours: int) -> str:
    """``1,344`` → ``8 weeks`` (the demand's length, in words)."""
    if hours >= 2 * HOURS_PER_YEAR:
        return f"{hours / HOURS_PER_YEAR:.1f} years"
    if hours >= 14 * 24:
        return f"{hours / (7 * 24):.0f} weeks"
    return f"{hours / 24:.0f} days" if hours >= 48 else f"{hours} hours"


def hourly_split(
    demand: Demand, prices: Mapping[str, GpuPrices], plan: FleetPlan, options: FleetOptions
) -> dict[str, np.ndarray]:
    """Fleet-wide GPUs per hour by billing type (for charts): reserved_used, reserved_paid, spot, on_demand."""
    d = dispatch(
        demand, prices, plan.solver.counts, replace(options, spot_overhead=plan.spot_overhead)
    )
    return {
        "reserved_used": d.reserved_used.sum(axis=0),
        "reserved_paid": np.full(demand.hours, float(d.reserved_gpus.sum())),
        "spot": d.spot_gpu_hours.sum(axis=0),
        "on_demand": d.on_demand.sum(axis=0),
    }
