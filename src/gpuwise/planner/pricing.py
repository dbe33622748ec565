"""Step 3 of a plan: price each evaluated setup per billing model (spot: interruptions,
checkpoints and the wait for capacity), plus the fixed cost of starting (module: core)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from gpuwise.catalog.offer import Billing
from gpuwise.catalog.reserved import ReservedTerm
from gpuwise.planner.assumptions import confidence_words
from gpuwise.planner.candidate import Candidate, Evaluated
from gpuwise.planner.model import Evaluation
from gpuwise.planner.rejections import Rejects
from gpuwise.planner.sites import Site, ZonePrice
from gpuwise.planner.spot import (
    CloudSpotRisk,
    SpotDefaults,
    SpotOutcome,
    p_meet_deadline,
    spot_outcome,
)
from gpuwise.planner.startup import StartupCosts
from gpuwise.planner.values import (
    PlanRequest,
    RejectKind,
)
from gpuwise.units import BYTES_PER_GB, BYTES_PER_GIB


def price_all(
    evaluated: Sequence[Evaluated],
    request: PlanRequest,
    spot: SpotDefaults,
    reserved: dict[tuple[str, int], ReservedTerm | None],
    costs: StartupCosts,
    rejects: Rejects,
) -> tuple[list[Candidate], int]:
    """Price each evaluated setup per billing; regions with the same instance type and price are one candidate.

    Sites of one instance type share their evaluations (same GPUs, same network), so the sites are
    grouped by price first and each group is priced once per node count.
    """
    if request.spot_mtbf_by_site:  # observed in run records (--spot-mtbf auto)
        from gpuwise.planner.spot_observed import with_observed

        spot = with_observed(spot, request.spot_mtbf_by_site)
    by_site: dict[int, list[Evaluated]] = {}
    for item in evaluated:
        by_site.setdefault(id(item.site), []).append(item)
    groups: dict[
        tuple[object, ...],
        tuple[list[Evaluated], ZonePrice, Billing, list[Site], CloudSpotRisk | None],
    ] = {}
    for items in by_site.values():
        site = items[0].site
        for billing in request.billings:  # prices do not depend on the node count
            price = _price(billing, site, reserved)
            if price is None:
                kind: RejectKind = (
                    "reserved-unknown"
                    if billing.startswith("reserved") and site.on_demand is not None
                    else "no-price"
                )
                rejects.add(
                    kind,
                    cloud=site.cloud,
                    billing=billing,
                    count=len(items),
                    reason=partial(_no_price_reason, kind, site.cloud, billing),
                )
                continue
            # spot risk can differ per instance type and region (fetched provider bands, issue 13)
            risk = (
                spot.for_instance(site.cloud, site.region, site.instance_type)
                if billing == "spot"
                else None
            )
            risk_p = None if risk is None else risk.monthly_interruption_probability
            key = (
                site.cloud,
                site.instance_type,
                site.gpu,
                site.gpu_count,
                billing,
                round(price.usd_per_hour, 4),
                price.outlier,
                len(items),
                risk_p,
                _observed(risk),
            )
            group = groups.get(key)
            if group is None:
                groups[key] = (items, price, billing, [site], risk)
            else:
                group[3].append(site)
    outcomes: dict[tuple[object, ...], tuple[SpotOutcome, str]] = {}
    probabilities: dict[tuple[object, ...], float] = {}
    # fixed and checkpoint hours depend on the setup, not the billing: once per evaluated setup
    # (sites of one GPU setup share its Evaluation object)
    by_ev: dict[tuple[int, int], tuple[float, float]] = {}
    setup_hours: dict[int, tuple[float, float]] = {}
    for item in evaluated:
        gpus = int(item.site.gpu_count) * item.nodes
        hit = by_ev.get((id(item.ev), gpus))
        if hit is None:
            hit = by_ev[(id(item.ev), gpus)] = (
                costs.hours(item.ev.weights_gib),
                _checkpoint_hours(item.ev, gpus, request, spot),
            )
        setup_hours[id(item)] = hit
    cands = []
    for items, price, billing, sites, risk in groups.values():
        regions = tuple(sorted({s.region for s in sites}))
        zones = sum(s.zones for s in sites)
        for item in items:
            fixed, c_hours = setup_hours[id(item)]
            cands.append(
                _candidate(
                    item,
                    price,
                    billing,
                    regions,
                    zones,
                    fixed,
                    c_hours,
                    risk,
                    request,
                    spot,
                    outcomes,
                    probabilities,
                    costs,
                )
            )
    return cands, len(evaluated) * len(request.billings)


def _price(
    billing: str, site: Site, reserved: dict[tuple[str, int], ReservedTerm | None]
) -> ZonePrice | None:
    if billing == "on-demand":
        return site.on_demand
    if billing == "spot":
        return site.spot
    term = reserved.get((site.cloud, 1 if billing == "reserved-1y" else 3))
    if term is None or site.on_demand is None:
        return None
    od = site.on_demand
    return ZonePrice(od.usd_per_hour * (1 - term.discount), od.zone, od.outlier, od.set_aside)


def _no_price_reason(kind: str, cloud: str, billing: str) -> str:
    if kind == "reserved-unknown":
        return (
            f"{cloud} {billing}: discount unknown (null in gpuwise's reserved.yaml) — set your rate in "
            "<config dir>/reserved.yaml to plan reserved capacity"
        )
    if billing == "spot":
        return f"{cloud} spot: no spot price (or no discount) in the catalog for these offers"
    return (
        f"{cloud} {billing}: no price in the catalog for these offers (e.g. reservation-only types)"
    )


def _candidate(
    item: Evaluated,
    price: ZonePrice,
    billing: Billing,
    regions: tuple[str, ...],
    zones: int,
    fixed: float,
    c_hours: float,
    risk: CloudSpotRisk | None,
    request: PlanRequest,
    spot: SpotDefaults,
    outcomes: dict[tuple[object, ...], tuple[SpotOutcome, str]],
    probabilities: dict[tuple[object, ...], float],
    costs: StartupCosts,
) -> Candidate:
    """``fixed``: start-up hours; ``c_hours``: one checkpoint write; ``risk``: the site's spot risk
    (spot only); ``costs.is_scarce``: GPUs whose spot capacity takes longer to get back."""
    ev, site, nodes = item.ev, item.site, item.nodes
    run_deadline = None if request.deadline_hours is None else request.deadline_hours - fixed
    p: float | None = None
    out: SpotOutcome | None = None
    source: str | None = None
    hours = ev.hours
    if risk is not None:
        wait = (
            spot.capacity_wait_scarce_hours
            if costs.is_scarce(site.gpu)
            else spot.capacity_wait_hours
        )
        key = (site.cloud, nodes, ev.hours, c_hours, risk.monthly_interruption_probability, wait)
        hit = outcomes.get((*key, _observed(risk)))
        if hit is None:
            hit = _spot(ev, risk, nodes, c_hours + wait, request, spot, c_hours)
            outcomes[(*key, _observed(risk))] = hit
        out, source = hit
        hours = out.expected_hours
        if run_deadline is not None:
            pkey = ((*key, _observed(risk)), run_deadline)
            p = probabilities.get(pkey)
            if p is None:
                p = p_meet_deadline(out, ev.hours, run_deadline) if run_deadline > 0 else 0.0
                probabilities[pkey] = p
    elif run_deadline is not None:
        p = 1.0 if hours <= run_deadline else 0.0
    total = hours + fixed
    # positional (the field order of Candidate): a keyword call costs twice as much, 15k times a plan
    return Candidate(
        site,
        regions,
        zones,
        nodes,
        billing,
        price,
        ev,
        total,
        price.usd_per_hour * nodes * total,  # cost
        fixed,
        c_hours,
        p,
        out,
        source,
    )


def _observed(risk: CloudSpotRisk | None) -> str | None:
    """An observed site's own figure (``--spot-mtbf auto``): kept out of every group and cache it
    does not share (its monthly probability is rounded; its rate is 1 / MTBF, exact)."""
    return risk.source if risk is not None and risk.confidence == "observed" else None


def _spot(
    ev: Evaluation,
    risk: CloudSpotRisk,
    nodes: int,
    reload_hours: float,
    request: PlanRequest,
    spot: SpotDefaults,
    c_hours: float,
) -> tuple[SpotOutcome, str]:
    """``reload_hours``: checkpoint reload plus the wait for capacity, per interruption (added to
    the restart); ``c_hours``: one checkpoint write."""
    site = (risk.cloud, risk.region, risk.instance_type)
    seen = next((s for s in request.spot_mtbf_by_site if s[:3] == site), None)
    if request.spot_mtbf_hours is not None:
        rate_node = 1 / request.spot_mtbf_hours
        source = f"spot MTBF {request.spot_mtbf_hours:g} h (given)"
    elif seen is not None:  # observed in run records (--spot-mtbf auto)
        rate_node, source = 1 / seen[3], seen[4]
    elif risk.band is not None:  # the provider's published band for this instance type and region
        rate_node = risk.rate_per_node_hour
        source = (
            f"{risk.instance_type} in {risk.region}: advisor band {risk.band} → "
            f"{risk.monthly_interruption_probability:.0%}/month, MTBF {risk.mtbf_hours:,.0f} h "
            f"({risk.confidence})"
        )
    else:
        rate_node = risk.rate_per_node_hour
        source = (
            f"{risk.cloud} default {risk.monthly_interruption_probability:.0%}/month "
            f"({confidence_words(risk.confidence)})"
        )
    restart = (
        request.restart_hours if request.restart_hours is not None else spot.restart_hours
    ) + reload_hours
    out = spot_outcome(
        ev.hours, rate_per_hour=rate_node * nodes, checkpoint_hours=c_hours, restart_hours=restart
    )
    return out, source


def _checkpoint_hours(
    ev: Evaluation, total_gpus: int, request: PlanRequest, spot: SpotDefaults
) -> float:
    """Checkpoint size / bandwidth; without a size, all GPU memory in use (conservative)."""
    ckpt_gib = request.checkpoint_gib
    if ckpt_gib is None:
        ckpt_gib = (
            ev.checkpoint_gib
            if ev.checkpoint_gib is not None
            else ev.per_gpu_memory_gib * total_gpus
        )
    bw = request.checkpoint_bandwidth_gb_s or spot.checkpoint_bandwidth_gb_s
    return ckpt_gib * BYTES_PER_GIB / (bw * BYTES_PER_GB) / 3600
