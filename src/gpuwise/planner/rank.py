"""Step 5 of a plan: order the feasible candidates by the objective, apply the rule that may buy
speed (asked for, or the deadline's confidence), mark the Pareto front, and build the options
(module: core)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from statistics import NormalDist
from typing import Any

from gpuwise.planner.candidate import Candidate
from gpuwise.planner.explain import fmt_hours, fmt_pct, fmt_usd
from gpuwise.planner.pair_error import pair_width as pair_width
from gpuwise.planner.pair_error import pair_widths as pair_widths
from gpuwise.planner.startup import StartupCosts
from gpuwise.planner.values import (
    MEMORY_ALERT_SHARE,
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


TIE_WITHIN = 0.02
"""Cost objective: options whose expected cost is within this fraction of the cheapest's are
ordered faster first, then on fewer nodes (gpuwise's own rule, issue 31; not a published figure)."""

_Z90 = NormalDist().inv_cdf(0.9)
"""The p10–p90 range is ± this many standard deviations of a normal log error."""
_SQRT2 = math.sqrt(2.0)


def p_within_deadline(c: Candidate, deadline_hours: float | None) -> float | None:
    """Chance to finish by the deadline, the estimator's own error counted (an approximation).

    The failure-free run time is lognormal around the estimate with the estimator's p10–p90 range
    as ±1.28 σ; it must fit in the deadline less everything else the expected hours hold (start-up,
    checkpoints, expected interruption losses). Spot: times the interruption model's chance
    (treated as independent). None without a deadline.
    """
    if deadline_hours is None:
        return None
    ev = c.ev
    room = deadline_hours - (c.hours - ev.hours)
    if room <= 0 or ev.hours <= 0:
        p_est = 1.0 if ev.hours <= 0 < room else 0.0
    elif ev.hours_p90 is None or ev.hours_p90 <= ev.hours:
        p_est = 1.0 if ev.hours <= room else 0.0
    else:  # the normal CDF by erf: thousands of options per plan
        sigma = math.log(ev.hours_p90 / ev.hours) / _Z90
        p_est = 0.5 * (1.0 + math.erf(math.log(room / ev.hours) / (sigma * _SQRT2)))
    return p_est * (c.p if c.billing == "spot" and c.p is not None else 1.0)


def choose(ranked: list[Candidate], request: PlanRequest) -> str | None:
    """Put the option the objective's rule picks first (sorts ``ranked``); say which rule chose.

    ``cost``: the lowest expected cost; options within :data:`TIE_WITHIN` of it are ordered faster
    first, then on fewer nodes. Speed is bought only when asked: ``prefer_faster_within`` (the
    fastest option costing at most that much more than the cheapest), or when the chosen option's
    chance to finish by the deadline (:func:`p_within_deadline`) is below ``deadline_confidence``:
    then the cheapest option that reaches it. None when there is no option.
    """
    if not ranked:
        return None
    if request.objective != "cost":
        what = {"time": "the shortest expected time", "balanced": "the lowest cost × time"}
        top = ranked[0]
        return (
            f"Chosen by --objective {request.objective}: {what[request.objective]}, {top.label} "
            f"({fmt_usd(top.cost)}, {fmt_hours(top.hours)})."
        )
    cheapest = ranked[0]
    tied = [c for c in ranked if c.cost <= cheapest.cost * (1 + TIE_WITHIN)]
    if len(tied) > 1:
        tied.sort(key=lambda c: (round(c.hours, 9), c.nodes, c.cost))
        ranked[: len(tied)] = tied
    top = ranked[0]
    rule = f"Chosen by lowest expected cost: {top.label} at {fmt_usd(top.cost)} in {fmt_hours(top.hours)}"
    if len(tied) > 1:
        rule += (
            f" ({len(tied)} options within {TIE_WITHIN:.0%} of the cheapest, "
            f"{fmt_usd(cheapest.cost)}, are ordered faster first, then on fewer nodes)"
        )
    pct = request.prefer_faster_within
    if pct is not None:
        band = [c for c in ranked if c.cost <= cheapest.cost * (1 + pct)]
        best = min(band, key=lambda c: (round(c.hours, 9), c.nodes, c.cost))
        _move_first(ranked, best)
        rule = (
            f"Chosen by --prefer-faster-within {pct:.0%}: {best.label}, the fastest option costing at "
            f"most {pct:.0%} more than the cheapest ({fmt_usd(cheapest.cost)}): "
            f"{fmt_usd(best.cost)} ({_more(best.cost, cheapest.cost)}) in {fmt_hours(best.hours)}"
        )
        top = best
    deadline, want = request.deadline_hours, request.deadline_confidence
    p_top = p_within_deadline(top, deadline)
    if p_top is None or deadline is None:
        return rule + "."
    chance = f"{fmt_pct(p_top)} chance to finish within {fmt_hours(deadline)}"
    if p_top >= want:
        return rule + f"; {chance} (≥ {fmt_pct(want)} asked, --deadline-confidence)."
    sure = next((c for c in ranked if (p_within_deadline(c, deadline) or 0.0) >= want), None)
    if sure is None:
        return (
            rule + f"; only a {chance}, and no option reaches the {fmt_pct(want)} asked "
            "(--deadline-confidence): it stays first."
        )
    _move_first(ranked, sure)
    return (
        f"Chosen by --deadline-confidence {fmt_pct(want)}: the option the cost rule picks, "
        f"{top.label} ({fmt_usd(top.cost)}, {fmt_hours(top.hours)}), has only a {chance}; "
        f"{sure.label} is the cheapest that reaches {fmt_pct(want)} "
        f"({fmt_pct(p_within_deadline(sure, deadline) or 0.0)}): {fmt_usd(sure.cost)} "
        f"({_more(sure.cost, cheapest.cost)} over the cheapest) in {fmt_hours(sure.hours)}."
    )


def _more(cost: float, base: float) -> str:
    return f"+{(cost / base - 1) * 100:.1f}%" if base > 0 else "more"


def _move_first(ranked: list[Candidate], c: Candidate) -> None:
    if ranked[0] is not c:
        ranked.remove(c)
        ranked.insert(0, c)


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
    request: PlanRequest,
    p_given: bool,
) -> tuple[PlanOption, ...]:
    """The ranked options; what depends only on the site (and the evaluation) is built once."""
    per_site: dict[int, dict[str, Any]] = {}
    per_ev: dict[int, dict[str, Any]] = {}
    return tuple(
        _to_option(i + 1, c, id(c) in front, costs, per_site, per_ev, p_given, request)
        for i, c in enumerate(feasible)
    )


def _to_option(
    rank: int,
    c: Candidate,
    on_front: bool,
    costs: StartupCosts,
    per_site: dict[int, dict[str, Any]],
    per_ev: dict[int, dict[str, Any]],
    p_given: bool,
    request: PlanRequest,
) -> PlanOption:
    ev, site = c.ev, c.site
    ckpt_gib = request.checkpoint_gib
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
    mem = per_ev.get(key)
    if mem is None:  # what depends only on the evaluation, once per evaluation
        share = ev.per_gpu_memory_gib / ev.capacity_gib if ev.capacity_gib > 0 else 0.0
        mem = per_ev[key] = {
            "settings": None if ev.settings is None else ev.settings.to_dict(),
            "failure_free_hours": ev.hours,
            "per_gpu_memory_gib": ev.per_gpu_memory_gib,
            "capacity_gib": ev.capacity_gib,
            "capacity_source": ev.capacity_source,
            "memory_limit_gib": ev.limit_gib,
            "memory_share": share,
            "memory_alert": share > MEMORY_ALERT_SHARE,
        }
    settings = mem["settings"]
    capacity = None
    if c.billing == "spot" and costs.is_scarce(site.gpu):
        capacity = (
            f"{site.gpu} spot capacity is scarce (gpuwise default list, no public data): the job may wait "
            "for capacity or be reclaimed more often than assumed; keep an on-demand fallback"
        )
    outcome, price, nodes = c.outcome, c.price, c.nodes
    values = base.copy()
    values.update(mem)
    values.update(
        rank=rank,
        regions=c.regions,
        nodes=nodes,
        billing=c.billing,
        price_usd_per_hour=price.usd_per_hour * nodes,
        hours=c.hours,
        cost_usd=c.cost,
        p_meet_deadline=c.p,
        p_finish_in_time=p_within_deadline(c, request.deadline_hours),
        p_meet_deadline_confidence=None
        if c.billing != "spot" or c.p is None
        else ("given" if p_given else "low"),
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
