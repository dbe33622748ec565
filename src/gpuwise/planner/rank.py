"""Step 5 of a plan: order the feasible candidates by the objective, prefer within the error
band, mark the Pareto front, and build the options (module: core)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from gpuwise.planner.candidate import Candidate
from gpuwise.planner.explain import fmt_hours, fmt_usd
from gpuwise.planner.startup import StartupCosts
from gpuwise.planner.values import (
    PlanOption,
    PlanRequest,
)


def sort_key(request: PlanRequest) -> Callable[[Candidate], tuple[object, ...]]:
    def key(c: Candidate) -> tuple[object, ...]:
        tail = (c.site.cloud, c.site.instance_type, c.nodes, c.billing, c.regions[0])
        if request.objective == "time":
            return (round(c.hours, 9), round(c.cost, 6), *tail)
        if request.objective == "balanced":
            return (round(c.cost * c.hours, 6), round(c.cost, 6), *tail)
        return (round(c.cost, 6), round(c.hours, 9), *tail)

    return key


SLACK_GAIN = 0.30
"""Within the cheapest option's error band, an option this much faster (or more) is materially
different: more deadline slack that the estimator's uncertainty does not erase. gpuwise's own rule,
not a published figure."""


def prefer_within_error_band(ranked: list[Candidate], request: PlanRequest) -> str | None:
    """Cost objective: move to the top the option the error bars cannot tell from the cheapest but
    that has materially more deadline slack, then fewer nodes; say why (None: the order stands).

    The band is the cheapest option's: every option whose estimated cost is at most the cheapest's
    pessimistic (p90) cost. Within it, an option that another band member beats by ``SLACK_GAIN`` or
    more in hours is not chosen; of the rest, the fewest nodes win, then the shortest time, then the
    lowest cost. The band is not re-centred on the pick: doing so chains from band to band towards
    ever faster and dearer options (+72 % over the cheapest on the README job), which is no longer
    "as cheap as the estimator can tell". Sorts ``ranked``.
    """
    if request.objective != "cost" or len(ranked) < 2:
        return None
    top = ranked[0]
    ceiling = _cost_range(top, top.ev.hours_p90)
    if ceiling is None or ceiling <= top.cost:
        return None
    band = [c for c in ranked if c.cost <= ceiling]
    fastest = min(c.hours for c in band)
    eligible = [c for c in band if c.hours * (1 - SLACK_GAIN) <= fastest]
    best = min(eligible, key=lambda c: (c.nodes, c.hours, c.cost))
    if best is top:
        return None
    ranked.remove(best)
    ranked.insert(0, best)
    why = []
    if best.hours <= top.hours * (1 - SLACK_GAIN):
        why.append(f"{1 - best.hours / top.hours:.0%} faster (more deadline slack)")
    if best.nodes < top.nodes:
        why.append(f"{best.nodes} node{'s' * (best.nodes > 1)} instead of {top.nodes}")
    if not why:
        why.append("as fast, on as few nodes")
    return (
        f"Ranked {best.label} ({fmt_usd(best.cost)}, {fmt_hours(best.hours)}) above the cheapest, "
        f"{top.label} ({fmt_usd(top.cost)}, {fmt_hours(top.hours)}): the estimator's p10–p90 "
        f"error bands cannot tell their costs apart (up to {fmt_usd(ceiling)}) and it is "
        + " and ".join(why)
        + f"; inside the band gpuwise prefers ≥{SLACK_GAIN:.0%} more speed, then fewer nodes."
    )


def pareto(cands: Sequence[Candidate]) -> set[int]:
    """ids of candidates no other beats on both cost and hours (ties kept once)."""
    front: set[int] = set()
    best_hours = math.inf
    for c in sorted(cands, key=lambda c: (c.cost, c.hours)):
        if c.hours < best_hours:
            front.add(id(c))
            best_hours = c.hours
    return front


def _cost_range(c: Candidate, hours: float | None) -> float | None:
    """Cost if the run took ``hours`` (the estimator's p10/p90) instead of its estimate."""
    if hours is None or c.ev.hours <= 0:
        return None
    run = (c.hours - c.fixed_hours) * hours / c.ev.hours
    return c.price.usd_per_hour * c.nodes * (run + c.fixed_hours)


def to_options(
    feasible: Sequence[Candidate],
    front: set[int],
    costs: StartupCosts,
    p_given: bool,
    ckpt_gib: float | None,
) -> tuple[PlanOption, ...]:
    """The ranked options; what depends only on the site (and the evaluation) is built once."""
    per_site: dict[int, dict[str, Any]] = {}
    per_ev: dict[int, dict[str, Any] | None] = {}
    return tuple(
        _to_option(i + 1, c, id(c) in front, costs, per_site, per_ev, p_given, ckpt_gib)
        for i, c in enumerate(feasible)
    )


def _to_option(
    rank: int,
    c: Candidate,
    on_front: bool,
    costs: StartupCosts,
    per_site: dict[int, dict[str, Any]],
    per_ev: dict[int, dict[str, Any] | None],
    p_given: bool,
    ckpt_gib: float | None,
) -> PlanOption:
    ev, site = c.ev, c.site
    base = per_site.get(id(site))
    if base is None:
        base = per_site[id(site)] = {
            "cloud": site.cloud,
            "region": site.region,
            "instance_type": site.instance_type,
            "gpu": site.gpu,
            "gpu_count": int(site.gpu_count),
            "fits": True,
            "network": site.network.describe(),
            "network_known": site.network.known,
            "network_fabric": site.network.fabric,
            "network_tier": "best" if site.network.needs_best_tier else "standard",
            "rdma_resource": site.network.rdma_resource,
            "price_as_of": site.as_of or None,
            "vcpus": site.vcpus,
            "memory_gib": site.memory_gib,
        }
    key = id(ev)
    if key in per_ev:
        settings = per_ev[key]
    else:
        settings = per_ev[key] = None if ev.settings is None else ev.settings.to_dict()
    capacity = None
    if c.billing == "spot" and site.gpu in costs.scarce_gpus:
        capacity = (
            f"{site.gpu} spot capacity is scarce (gpuwise default list, no public data): the job may wait "
            "for capacity or be reclaimed more often than assumed; keep an on-demand fallback"
        )
    outcome, price, nodes = c.outcome, c.price, c.nodes
    values = base.copy()
    values.update(
        rank=rank,
        regions=c.regions,
        nodes=nodes,
        billing=c.billing,
        price_usd_per_hour=price.usd_per_hour * nodes,
        hours=c.hours,
        cost_usd=c.cost,
        p_meet_deadline=c.p,
        p_meet_deadline_confidence=None
        if c.billing != "spot" or c.p is None
        else ("given" if p_given else "low"),
        failure_free_hours=ev.hours,
        per_gpu_memory_gib=ev.per_gpu_memory_gib,
        capacity_gib=ev.capacity_gib,
        on_pareto_front=on_front,
        checkpoint_interval_hours=(
            None
            if outcome is None or math.isinf(outcome.interval_hours)
            else outcome.interval_hours
        ),
        expected_interruptions=None if outcome is None else outcome.expected_interruptions,
        interruption_source=c.source,
        zones=c.zones,
        checkpoint_hours=c.checkpoint_hours,
        checkpoint_gib=ckpt_gib if ckpt_gib is not None else ev.checkpoint_gib,
        # each option its own copy: options are values, and a caller may edit one's settings
        settings=None if settings is None else dict(settings),
        zone=price.zone,
        zone_pinned=price.outlier,
        zones_set_aside=price.set_aside,
        fixed_hours=c.fixed_hours,
        cost_usd_p10=_cost_range(c, ev.hours_p10),
        cost_usd_p90=_cost_range(c, ev.hours_p90),
        capacity_note=capacity,
        similar=len(c.regions),
    )
    return PlanOption.of_all_fields(values)  # every field given: see of_all_fields
