"""The planner: join a workload model with catalog offers, price every way to run the job, rank.

:func:`plan_offers` is pure (offers, model, request in; :class:`Plan` out) and reads as its steps:

1. **sites** (:mod:`~gpuwise.planner.sites`): one per cloud × region × instance type, with the price
   you can get there, the zone that gives it, and the instance's network;
2. **settings + evaluate**: per site and node count, the model finds the job's cheapest settings
   that fit (:mod:`~gpuwise.planner.settings`) and their failure-free hours;
3. **price**: per billing model, expected hours and cost (spot: interruptions and checkpoints),
   plus the fixed cost of starting (:mod:`~gpuwise.planner.startup`); rows that differ only by region
   at the same price are merged into one candidate that lists its regions;
4. **filter**: deadline and budget;
5. **rank**: by the objective, with the Pareto front.

What is dropped on the way is grouped into :class:`~gpuwise.planner.values.Rejection` s.
"""

from __future__ import annotations

import gc
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, NamedTuple

from gpuwise.catalog.offer import Billing, Offer
from gpuwise.catalog.reserved import ReservedTerm
from gpuwise.errors import EstimateError, HardwareError
from gpuwise.planner.explain import explain, fmt_hours, fmt_usd
from gpuwise.planner.model import Evaluation, WorkloadModel
from gpuwise.planner.settings import BatchSplitError
from gpuwise.planner.sites import Site, ZonePrice, build_sites
from gpuwise.planner.spot import (
    CloudSpotRisk,
    SpotDefaults,
    SpotOutcome,
    p_meet_deadline,
    spot_outcome,
)
from gpuwise.planner.startup import StartupCosts, load_startup_defaults
from gpuwise.planner.values import (
    Plan,
    PlanOption,
    PlanRequest,
    Rejection,
    RejectKind,
    option_label,
)
from gpuwise.units import BYTES_PER_GB, BYTES_PER_GIB

_KIND_ORDER: dict[RejectKind, int] = {
    "deadline": 0,
    "budget": 1,
    "no-fit": 2,
    "max-gpus": 3,
    "no-estimate": 4,
    "reserved-unknown": 5,
    "no-price": 6,
    "fractional": 7,
    "batch": 8,
}


class Candidate(NamedTuple):
    """One priced way to run the job (before the deadline and budget are applied).

    An immutable named tuple rather than a frozen dataclass: tens of thousands are made per plan,
    and a frozen dataclass pays ``object.__setattr__`` per field.
    """

    site: Site
    """The first region's site (same instance type and price in every region of ``regions``)."""
    regions: tuple[str, ...]
    zones: int
    nodes: int
    billing: Billing
    price: ZonePrice
    """Price of one instance and the zone that gives it (in ``site.region``)."""
    ev: Evaluation
    hours: float
    """Expected wall-clock hours, fixed costs included."""
    cost: float
    fixed_hours: float
    checkpoint_hours: float
    p: float | None = None
    """Probability to meet the deadline (None without one)."""
    outcome: SpotOutcome | None = None
    source: str | None = None

    @property
    def gpu(self) -> str:
        return self.site.gpu

    @property
    def gpn(self) -> int:
        return int(self.site.gpu_count)

    @property
    def label(self) -> str:
        return option_label(
            self.gpu, self.gpn, self.nodes, self.site.cloud, self.site.instance_type, self.billing
        )


@dataclass
class _Group:
    """A rejection group while it is being filled (typed; becomes a frozen Rejection at the end)."""

    kind: RejectKind
    gpu: str | None = None
    gpu_count: float | None = None
    cloud: str | None = None
    billing: str | None = None
    reason: str = ""
    offers: int = 0
    nodes: set[int] = field(default_factory=set)
    capacity_gib: float = 0.0
    need_gib: dict[int, float] = field(default_factory=dict)
    searched: bool = False
    """no-fit: the model tried more than one setting."""
    best: Candidate | None = None


class _Rejects:
    """Rejection groups keyed by kind and what they share."""

    def __init__(self) -> None:
        self.groups: dict[tuple[object, ...], _Group] = {}

    def add(
        self,
        kind: RejectKind,
        *,
        gpu: str | None = None,
        gpu_count: float | None = None,
        cloud: str | None = None,
        billing: str | None = None,
        nodes: int | None = None,
        reason: Callable[[], str] | None = None,
        capacity_gib: float = 0.0,
        count: int = 1,
    ) -> _Group:
        """Count one more member of the group (made on first use; ``reason`` is called then)."""
        key = (kind, gpu, gpu_count, cloud, billing)
        g = self.groups.get(key)
        if g is None:
            g = _Group(
                kind,
                gpu=gpu,
                gpu_count=gpu_count,
                cloud=cloud,
                billing=billing,
                reason=reason() if reason is not None else "",
                capacity_gib=capacity_gib,
            )
            self.groups[key] = g
        g.offers += count
        if nodes is not None:
            g.nodes.add(nodes)
        return g


class _Evaluated(NamedTuple):
    """A site on ``nodes`` nodes with the settings that fit."""

    site: Site
    nodes: int
    ev: Evaluation


def plan_offers(
    offers: Sequence[Offer],
    model: WorkloadModel,
    request: PlanRequest,
    *,
    spot: SpotDefaults,
    reserved: dict[tuple[str, int], ReservedTerm | None],
    startup: StartupCosts | None = None,
) -> Plan:
    """Rank every way to run the workload on ``offers`` under ``request`` (module docstring)."""
    # A plan allocates ~100k short-lived, acyclic objects (candidates, options); the cyclic garbage
    # collector's passes over them cost about a quarter of the time and find nothing. Pause it
    # for the plan and restore it after (the first collection after that catches up).
    paused = gc.isenabled()
    gc.disable()
    try:
        return _plan_offers(offers, model, request, spot, reserved, startup)
    finally:
        if paused:
            gc.enable()


def _plan_offers(
    offers: Sequence[Offer],
    model: WorkloadModel,
    request: PlanRequest,
    spot: SpotDefaults,
    reserved: dict[tuple[str, int], ReservedTerm | None],
    startup: StartupCosts | None,
) -> Plan:
    clouds, gpus = _check_filters(offers, request)
    costs = _startup(request, startup or load_startup_defaults())
    rejects = _Rejects()
    sites = build_sites(offers, request, clouds, gpus)
    evaluated, evals = _evaluate(sites, model, request, rejects)
    candidates, considered = _price_all(evaluated, request, spot, reserved, costs, rejects)
    feasible = _filter(candidates, request, rejects)
    feasible.sort(key=_sort_key(request))
    ranking_note = _prefer_within_error_band(feasible, request)
    front = _pareto(feasible)
    options = _to_options(
        feasible, front, costs, request.spot_mtbf_hours is not None, request.checkpoint_gib
    )
    pareto = tuple(
        sorted((o for o in options if o.on_pareto_front), key=lambda o: (o.cost_usd, o.hours))
    )
    rejected = _finish_rejections(rejects, request)
    reason, nearest = (None, None) if options else _why_empty(request, candidates, rejects, sites)
    spot_clouds = {c.site.cloud for c in candidates if c.billing == "spot"}
    workload = dict(model.describe())
    return Plan(
        workload=workload,
        request=request,
        options=options,
        pareto=pareto,
        rejected=rejected,
        explanation=(() if ranking_note is None else (ranking_note,))
        + tuple(explain(options, rejected, request)),
        ranking_note=ranking_note,
        reason=reason,
        nearest_miss=nearest,
        considered=considered,
        assumptions=_recipe(workload) + _assumptions(request, spot, spot_clouds, costs, sites),
        settings_evaluated=sum(e.evaluated for e in evals if isinstance(e, Evaluation)),
    )


def _check_filters(
    offers: Sequence[Offer], request: PlanRequest
) -> tuple[set[str], set[str] | None]:
    """Validate the cloud/region/GPU filters against the catalog (did-you-mean); return clouds and GPUs."""
    from gpuwise.catalog.query import check_clouds, check_region, resolve_gpu_filter

    check_clouds(request.clouds, offers)
    for pattern in request.regions:
        check_region(pattern, offers, request.clouds)
    clouds = set(request.clouds) or {o.cloud for o in offers}
    gpus = {resolve_gpu_filter(g, offers) for g in request.gpus} if request.gpus else None
    return clouds, gpus


def _startup(request: PlanRequest, defaults: StartupCosts) -> StartupCosts:
    from dataclasses import replace

    return replace(
        defaults,
        provision_hours=defaults.provision_hours
        if request.provision_hours is None
        else request.provision_hours,
        startup_hours=defaults.startup_hours
        if request.startup_hours is None
        else request.startup_hours,
        download_gbit_s=defaults.download_gbit_s
        if request.download_gbit_s is None
        else request.download_gbit_s,
    )


# -- 2. settings + evaluate ------------------------------------------------------------------------


def _evaluate(
    sites: Sequence[Site], model: WorkloadModel, request: PlanRequest, rejects: _Rejects
) -> tuple[list[_Evaluated], list[Evaluation | HardwareError | EstimateError]]:
    """Every site × node count whose job fits, with its settings; the rest become rejections."""
    out: list[_Evaluated] = []
    seen: dict[tuple[str, int, int, float], Evaluation | HardwareError | EstimateError] = {}
    for site in sites:
        count = site.gpu_count
        if count < 1 or count != int(count):
            rejects.add(
                "fractional",
                gpu=site.gpu,
                gpu_count=count,
                reason=partial(
                    str.format, "{} ×{:g}: fractional GPUs are not planned", site.gpu, count
                ),
            )
            continue
        gpn = int(count)
        for nodes in range(1, request.max_nodes + 1):
            if request.max_gpus is not None and gpn * nodes > request.max_gpus:
                if nodes == 1:
                    rejects.add(
                        "max-gpus",
                        gpu=site.gpu,
                        gpu_count=gpn,
                        reason=partial(
                            str.format,
                            "{} ×{}: more GPUs per node than the {} GPUs allowed in total",
                            site.gpu,
                            gpn,
                            request.max_gpus,
                        ),
                    )
                break
            key = (site.gpu, gpn, nodes, site.network.inter_node_gbit_s if nodes > 1 else 0.0)
            ev = seen.get(key)
            if ev is None:
                try:
                    ev = model.evaluate(site.gpu, gpn, nodes, site.network)
                except (HardwareError, EstimateError) as exc:
                    ev = exc
                seen[key] = ev
            if isinstance(ev, BatchSplitError):
                # another node count may divide the global batch: keep going
                rejects.add(
                    "batch",
                    gpu=site.gpu,
                    gpu_count=gpn,
                    nodes=nodes,
                    reason=partial(
                        str.format,
                        "{} ×{}: the data-parallel GPUs do not divide the plan's global batch of {}",
                        site.gpu,
                        gpn,
                        ev.global_batch,
                    ),
                )
                continue
            if not isinstance(ev, Evaluation):
                rejects.add(
                    "no-estimate",
                    gpu=site.gpu,
                    reason=partial(str.format, "{}: cannot estimate ({})", site.gpu, ev.message),
                )
                break
            if not ev.fits:
                g = rejects.add(
                    "no-fit", gpu=site.gpu, gpu_count=gpn, capacity_gib=ev.capacity_gib, nodes=nodes
                )
                g.need_gib[nodes] = ev.per_gpu_memory_gib
                g.searched = g.searched or ev.evaluated > 1
                continue
            out.append(_Evaluated(site, nodes, ev))
    results = list(seen.values())
    errors = [e for e in results if isinstance(e, EstimateError)]
    if errors and not any(isinstance(e, Evaluation) for e in results):
        # nothing could be estimated: a workload problem, not a plan
        common = Counter(e.message for e in errors).most_common(1)[0][0]
        raise next(e for e in errors if e.message == common)
    return out, results


# -- 3. price -----------------------------------------------------------------------------------------


def _price_all(
    evaluated: Sequence[_Evaluated],
    request: PlanRequest,
    spot: SpotDefaults,
    reserved: dict[tuple[str, int], ReservedTerm | None],
    costs: StartupCosts,
    rejects: _Rejects,
) -> tuple[list[Candidate], int]:
    """Price each evaluated setup per billing; regions with the same instance type and price are one candidate.

    Sites of one instance type share their evaluations (same GPUs, same network), so the sites are
    grouped by price first and each group is priced once per node count.
    """
    by_site: dict[int, list[_Evaluated]] = {}
    for item in evaluated:
        by_site.setdefault(id(item.site), []).append(item)
    groups: dict[
        tuple[object, ...],
        tuple[list[_Evaluated], ZonePrice, Billing, list[Site], CloudSpotRisk | None],
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
                    costs.scarce_gpus,
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
    item: _Evaluated,
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
    scarce: tuple[str, ...],
) -> Candidate:
    """``fixed``: start-up hours; ``c_hours``: one checkpoint write; ``risk``: the site's spot risk
    (spot only); ``scarce``: GPUs whose spot capacity takes longer to get back."""
    ev, site, nodes = item.ev, item.site, item.nodes
    run_deadline = None if request.deadline_hours is None else request.deadline_hours - fixed
    p: float | None = None
    out: SpotOutcome | None = None
    source: str | None = None
    hours = ev.hours
    if risk is not None:
        wait = spot.capacity_wait_scarce_hours if site.gpu in scarce else spot.capacity_wait_hours
        key = (site.cloud, nodes, ev.hours, c_hours, risk.monthly_interruption_probability, wait)
        hit = outcomes.get(key)
        if hit is None:
            hit = _spot(ev, risk, nodes, c_hours + wait, request, spot, c_hours)
            outcomes[key] = hit
        out, source = hit
        hours = out.expected_hours
        if run_deadline is not None:
            pkey = (key, run_deadline)
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
    if request.spot_mtbf_hours is not None:
        rate_node = 1 / request.spot_mtbf_hours
        source = f"spot MTBF {request.spot_mtbf_hours:g} h (given)"
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
            f"({_confidence_words(risk.confidence)})"
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


# -- 4. filter --------------------------------------------------------------------------------------


def _meets_deadline(c: Candidate, request: PlanRequest) -> bool:
    if request.deadline_hours is None:
        return True
    if c.billing == "spot":
        return c.p is not None and c.p >= request.confidence
    return c.hours <= request.deadline_hours


def _filter(cands: Sequence[Candidate], request: PlanRequest, rejects: _Rejects) -> list[Candidate]:
    feasible = []
    for c in cands:
        if not _meets_deadline(c, request):
            g = rejects.add(
                "deadline", gpu=c.gpu, gpu_count=c.gpn, billing=c.billing, nodes=c.nodes
            )
            if g.best is None or c.hours < g.best.hours:
                g.best = c
            continue
        if request.budget_usd is not None and c.cost > request.budget_usd:
            g = rejects.add("budget", gpu=c.gpu, gpu_count=c.gpn, billing=c.billing, nodes=c.nodes)
            if g.best is None or c.cost < g.best.cost:
                g.best = c
            continue
        feasible.append(c)
    return feasible


# -- 5. rank ----------------------------------------------------------------------------------------


def _sort_key(request: PlanRequest) -> Callable[[Candidate], tuple[object, ...]]:
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


def _prefer_within_error_band(ranked: list[Candidate], request: PlanRequest) -> str | None:
    """Cost objective: move to the top the option the error bars cannot tell from the cheapest but
    that has materially more deadline slack, then fewer nodes; say why (None: the order stands).

    The band reaches up to the cheapest option's pessimistic (p90) cost. Within it, an option that
    another band member beats by ``SLACK_GAIN`` or more in hours is not chosen; of the rest, the
    fewest nodes win, then the shortest time, then the lowest cost. The chosen option's own band
    is then checked the same way (so no option within it is ``SLACK_GAIN`` faster). Sorts ``ranked``.
    """
    if request.objective != "cost" or len(ranked) < 2:
        return None
    top = best = ranked[0]
    ceiling = top.cost
    for _ in range(8):  # the band of each new choice is checked too; it only grows, so this ends
        high = _cost_range(best, best.ev.hours_p90)
        if high is None or high <= ceiling:
            break
        ceiling = high
        band = [c for c in ranked if c.cost <= ceiling]
        fastest = min(c.hours for c in band)
        eligible = [c for c in band if c.hours * (1 - SLACK_GAIN) <= fastest]
        pick = min(eligible, key=lambda c: (c.nodes, c.hours, c.cost))
        if pick is best:
            break
        best = pick
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


def _pareto(cands: Sequence[Candidate]) -> set[int]:
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


def _to_options(
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


# -- rejections and empty plans -------------------------------------------------------------------


def _span(nodes: set[int]) -> str:
    lo, hi = min(nodes), max(nodes)
    if lo == hi:
        return "" if lo == 1 else f" on {lo} nodes"
    return f" on {lo}–{hi} nodes"


def _finish_rejections(rejects: _Rejects, request: PlanRequest) -> tuple[Rejection, ...]:
    out: list[tuple[tuple[int, float], Rejection]] = []
    for g in rejects.groups.values():
        nodes = tuple(sorted(g.nodes))
        if g.kind == "no-fit":
            top = max(nodes)
            need = g.need_gib[top]
            where = f" on {top} nodes" if len(nodes) > 1 or top > 1 else ""
            digits = 1 if round(need) == round(g.capacity_gib) else 0
            tried = " with any settings tried" if g.searched else ""
            reason = (
                f"{g.gpu} ×{g.gpu_count}{_span(g.nodes)}: does not fit{tried} (needs {need:.{digits}f} "
                f"GiB/GPU{where}, has {g.capacity_gib:.{digits}f})"
            )
            out.append(
                (
                    (_KIND_ORDER[g.kind], need - g.capacity_gib),
                    Rejection(
                        kind=g.kind,
                        reason=reason,
                        offers=g.offers,
                        gpu=g.gpu,
                        gpu_count=g.gpu_count,
                        nodes=nodes,
                    ),
                )
            )
            continue
        best = g.best
        if g.kind in ("deadline", "budget") and best is not None:
            setup = f"{best.gpu} ×{best.gpn}{_span(g.nodes)} {best.billing}"
            if g.kind == "deadline":
                deadline = request.deadline_hours or 0.0
                if (
                    best.billing == "spot"
                    and best.p is not None
                    and best.outcome is not None
                    and best.outcome.failure_free_hours + best.fixed_hours <= deadline
                ):
                    why = (
                        f"{best.p:.0%} chance to finish within {fmt_hours(deadline)} "
                        f"(needs {request.confidence:.0%}; best {best.label})"
                    )
                else:
                    why = f"misses the {fmt_hours(deadline)} deadline (fastest {fmt_hours(best.hours)}, {best.label})"
                metric = best.hours
            else:
                why = f"over the {fmt_usd(request.budget_usd or 0)} budget (cheapest {fmt_usd(best.cost)}, {best.label})"
                metric = best.cost
            out.append(
                (
                    (_KIND_ORDER[g.kind], metric),
                    Rejection(
                        kind=g.kind,
                        reason=f"{setup}: {why}",
                        offers=g.offers,
                        gpu=best.gpu,
                        gpu_count=best.gpn,
                        nodes=nodes,
                        billing=best.billing,
                        cloud=best.site.cloud,
                        example=best.label,
                        hours=best.hours,
                        cost_usd=best.cost,
                    ),
                )
            )
            continue
        reason = g.reason
        if g.kind == "batch":
            head, _, tail = reason.partition(":")
            counts = ", ".join(str(n) for n in sorted(g.nodes))
            reason = f"{head} on {counts} node(s):{tail} — give --global-batch as a multiple of the GPU count"
        out.append(
            (
                (_KIND_ORDER[g.kind], 0.0),
                Rejection(
                    kind=g.kind,
                    reason=reason,
                    offers=g.offers,
                    gpu=g.gpu,
                    gpu_count=g.gpu_count,
                    billing=g.billing,
                    cloud=g.cloud,
                ),
            )
        )
    out.sort(key=lambda x: (x[0], x[1].reason))
    return tuple(r for _, r in out)


def _why_empty(
    request: PlanRequest, cands: Sequence[Candidate], rejects: _Rejects, sites: Sequence[Site]
) -> tuple[str, str | None]:
    if not sites:
        return ("no offer matches the cloud/region/GPU filters", None)
    if not cands:
        misses = [g for g in rejects.groups.values() if g.kind == "no-fit"]
        if not misses:
            return ("no offer can be priced for the requested billing models (see rejected)", None)
        best = min(misses, key=lambda g: g.need_gib[max(g.nodes)] / g.capacity_gib)
        top = max(best.nodes)
        total = int(best.gpu_count or 1) * top
        return (
            "the workload fits on no GPU setup in the catalog",
            f"closest: {total}×{best.gpu} needs {best.need_gib[top]:.0f} GiB/GPU, has "
            f"{best.capacity_gib:.0f} (try more nodes, a smaller model or sequence, or another precision)",
        )
    on_time = [c for c in cands if _meets_deadline(c, request)]
    if not on_time:
        fastest = min(cands, key=lambda c: (c.hours, c.cost))
        return (
            "no option meets the deadline",
            f"fastest possible: {fmt_hours(fastest.hours)} on {fastest.label}, {fmt_usd(fastest.cost)}",
        )
    cheapest = min(on_time, key=lambda c: (c.cost, c.hours))
    reason = (
        "no option that meets the deadline is within the budget"
        if request.deadline_hours is not None
        else "no option is within the budget"
    )
    return (
        reason,
        f"cheapest possible: {fmt_usd(cheapest.cost)} on {cheapest.label} in {fmt_hours(cheapest.hours)}",
    )


def _assumptions(
    request: PlanRequest,
    spot: SpotDefaults,
    clouds: set[str],
    costs: StartupCosts,
    sites: Sequence[Site],
) -> tuple[str, ...]:
    """The model inputs that are defaults or placeholders."""
    out = []
    if clouds and request.spot_mtbf_hours is None:
        for cloud in sorted(clouds):
            risk = spot.for_cloud(cloud)
            known = sum(
                1 for k in spot.instances if k[0] == cloud
            )  # fetched per-instance bands (issue 13)
            where = f" where the {known} fetched per-instance bands do not apply" if known else ""
            out.append(
                f"{cloud} spot interruptions: {risk.monthly_interruption_probability:.0%}/month per "
                f"instance{where} (MTBF {risk.mtbf_hours:,.0f} h, {_confidence_words(risk.confidence)}) — "
                "override with spot_mtbf_hours (--spot-mtbf)"
            )
    if clouds and (spot.capacity_wait_hours or spot.capacity_wait_scarce_hours):
        out.append(
            f"spot capacity comes back {spot.capacity_wait_hours * 60:.0f} min after an interruption "
            f"({spot.capacity_wait_scarce_hours * 60:.0f} min for {', '.join(costs.scarce_gpus)}; "
            "placeholders: no provider publishes it) — set capacity_wait_minutes in spot.yaml; "
            "P(deadline) of spot options is low-confidence (marked ?) unless --spot-mtbf is given"
        )
    if clouds and request.checkpoint_bandwidth_gb_s is None:
        out.append(
            f"checkpoint bandwidth {spot.checkpoint_bandwidth_gb_s:g} GB/s (placeholder) — "
            "override with checkpoint_bandwidth_gb_s (--checkpoint-bandwidth)"
        )
    if clouds and request.restart_hours is None:
        out.append(
            f"restart {spot.restart_hours * 60:.0f} min + checkpoint reload (placeholder) — "
            "override with restart_hours (--restart-time)"
        )
    fixed = []
    if request.provision_hours is None:
        fixed.append(f"provisioning {costs.provision_hours * 60:.0f} min")
    if request.download_gbit_s is None:
        fixed.append(
            f"downloads (image {costs.image_gib:g} GiB + model weights) at {costs.download_gbit_s:g} Gbit/s"
        )
    if request.startup_hours is None:
        fixed.append(f"start-up {costs.startup_hours * 60:.0f} min")
    if fixed:
        out.append(
            "fixed costs per job (placeholders, added to every option): "
            + ", ".join(fixed)
            + " — override with provision_hours/download_gbit_s/startup_hours "
            "(--provision-time, --download-gbps, --startup-time)"
        )
    scale_set = sorted(
        {
            s.instance_type
            for s in sites
            if s.network.source.startswith("InfiniBand only within one VM scale set")
        }
    )
    if scale_set:
        out.append(
            f"Azure {', '.join(scale_set[:3])}{' …' if len(scale_set) > 3 else ''}: InfiniBand "
            "connects only VMs of one scale set, which SkyPilot does not create, so multi-node "
            "options are timed on the default network — give --inter-node-gbps (e.g. 1600) when "
            "you run them in one scale set (an AKS node pool)"
        )
    if request.network_tier == "standard":
        out.append(
            "network tier standard: EFA, InfiniBand, RDMA and GPUDirect-TCPX are not used; every "
            "instance is timed on its default network (the export asks for nothing more)"
        )
    unknown = sorted(
        {
            f"{s.cloud} {s.instance_type}"
            for s in sites
            if not s.network.known and s.network.fabric == "unknown"
        }
    )
    if unknown:
        more = f" and {len(unknown) - 3} more" if len(unknown) > 3 else ""
        out.append(
            f"network of {', '.join(unknown[:3])}{more}: not in gpuwise's network table, "
            "a conservative 10 Gbit/s assumed for multi-node options — override with inter_node_gbit_s "
            "(--inter-node-gbps)"
        )
    return tuple(out)


def _recipe(workload: dict[str, Any]) -> tuple[str, ...]:
    """The one training recipe every option runs (the model's fixed global batch), when it has one."""
    source, gb = workload.get("global_batch_source"), workload.get("global_batch")
    if not source or not gb:
        return ()
    tokens_per_step = workload.get("global_batch_tokens")
    tokens = f" = {tokens_per_step:,} tokens" if tokens_per_step else ""
    return (
        f"one recipe for every option: global batch {gb:,} sequences{tokens} per optimizer step "
        f"({source}); each option reaches it with micro-batch × accumulation × data-parallel GPUs "
        "(its settings) — override with global_batch (--global-batch)",
    )


def _confidence_words(confidence: str) -> str:
    """``low`` → "low confidence"; ``assumption`` → "a placeholder: no public figure"."""
    return (
        "a placeholder: no public figure"
        if confidence == "assumption"
        else f"{confidence} confidence"
    )
