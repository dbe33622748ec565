"""The planner: join a workload model with catalog offers, price every way to run the job, rank.

:func:`plan_offers` is pure (offers, model, request in; :class:`Plan` out): it enumerates cloud ×
region × instance × billing × nodes, drops what does not fit or cannot be priced, prices the
rest (expected time and cost under the spot model for spot), applies the deadline and budget,
ranks by the objective, and computes the Pareto front. Rows that differ only by availability
zone, or by region at the same price, are merged into one option that lists its regions.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Sequence
from typing import Any

from gpuwise.catalog.offer import Offer
from gpuwise.catalog.reserved import ReservedTerm
from gpuwise.errors import EstimateError, GpuwiseError, HardwareError
from gpuwise.plan.explain import explain, fmt_hours, fmt_usd
from gpuwise.plan.model import Evaluation, WorkloadModel
from gpuwise.plan.spot import SpotDefaults, SpotOutcome, p_meet_deadline, spot_outcome
from gpuwise.plan.values import Plan, PlanOption, PlanRequest, Rejection, option_label
from gpuwise.units import BYTES_PER_GB, BYTES_PER_GIB

_KIND_ORDER = {"deadline": 0, "budget": 1, "no-fit": 2, "max-gpus": 3, "no-estimate": 4, "reserved-unknown": 5,
               "no-price": 6, "fractional": 7}


def _setup(gpu: str, gpn: int, nodes: int) -> str:
    return f"{gpn * nodes}×{gpu}"


def _label(c: _Cand) -> str:
    return option_label(c.gpu, c.gpn, c.nodes, c.cloud, c.instance_type, c.billing)


class _Cand:
    """A priced candidate during enumeration (a plain slotted object: thousands are made)."""

    __slots__ = ("billing", "cloud", "cost", "ev", "gpn", "gpu", "hours", "instance_type", "nodes",
                 "out", "p", "price", "regions", "source", "zones")

    def __init__(self, cloud: str, region: str, instance_type: str, gpu: str, gpn: int, nodes: int,
                 billing: str, price: float, zones: int, ev: Evaluation) -> None:
        self.cloud, self.instance_type, self.gpu, self.gpn, self.nodes = cloud, instance_type, gpu, gpn, nodes
        self.billing, self.price, self.zones, self.ev = billing, price, zones, ev
        self.regions = [region]
        self.hours = self.cost = 0.0
        self.p: float | None = None
        self.out: SpotOutcome | None = None
        self.source: str | None = None


def _check_filters(offers: Sequence[Offer], request: PlanRequest) -> tuple[set[str], set[str] | None]:
    """Validate --cloud/--region/--gpu against the catalog (did-you-mean); return clouds and GPUs."""
    from gpuwise.catalog.query import check_clouds, check_region, resolve_gpu_filter

    check_clouds(request.clouds, offers)
    for pattern in request.regions:
        check_region(pattern, offers, request.clouds)
    clouds = set(request.clouds) or {o.cloud for o in offers}
    gpus = {resolve_gpu_filter(g, offers) for g in request.gpus} if request.gpus else None
    return clouds, gpus


class _Rejects:
    """Groups rejections as they are found; keeps the best member of each group."""

    def __init__(self) -> None:
        self.groups: dict[tuple[Any, ...], dict[str, Any]] = {}

    def add(self, kind: str, key: tuple[Any, ...], **info: Any) -> dict[str, Any]:
        group = self.groups.get((kind, *key))
        if group is None:
            group = {"kind": kind, "offers": 0, "nodes": set(), **info}
            self.groups[(kind, *key)] = group
        group["offers"] += 1
        return group


def plan_offers(offers: Sequence[Offer], model: WorkloadModel, request: PlanRequest, *,
                spot: SpotDefaults, reserved: dict[tuple[str, int], ReservedTerm | None]) -> Plan:
    """Rank every way to run the workload on ``offers`` under ``request`` (module docstring)."""
    clouds, gpus = _check_filters(offers, request)
    rejects = _Rejects()

    # 1. Collapse availability-zone rows: one site per (cloud, region, instance type, GPU, count).
    sites: dict[tuple[str, str, str, str, float], list[Any]] = {}
    for o in offers:
        if o.cloud not in clouds or (gpus is not None and o.gpu not in gpus):
            continue
        if request.regions and not any(fnmatch.fnmatchcase(o.region, p) for p in request.regions):
            continue
        key = (o.cloud, o.region, o.instance_type, o.gpu, o.gpu_count)
        site = sites.get(key)
        spot_price = o.spot_usd_per_hour if o.has_spot_discount else None
        if site is None:
            sites[key] = [o.on_demand_usd_per_hour, spot_price, 1]
        else:
            site[0] = _min(site[0], o.on_demand_usd_per_hour)
            site[1] = _min(site[1], spot_price)
            site[2] += 1

    evals: dict[tuple[str, int, int], Evaluation | GpuwiseError] = {}
    outcomes: dict[tuple[Any, ...], tuple[SpotOutcome, str]] = {}
    merged: dict[tuple[Any, ...], _Cand] = {}
    considered = 0
    for (cloud, region, itype, gpu, count), (od, sp, zones) in sorted(sites.items()):
        if count < 1 or count != int(count):
            rejects.add("fractional", (gpu, count), gpu=gpu, gpu_count=count,
                        reason=f"{gpu} ×{count:g}: fractional GPUs are not planned")
            continue
        gpn = int(count)
        priced: list[tuple[str, float]] = []
        unpriced: list[str] = []
        for bill in request.billings:  # prices do not depend on the node count
            price = _price(bill, od, sp, cloud, reserved)
            if price is None:
                unpriced.append(bill)
            else:
                priced.append((bill, price))
        fitting_nodes = 0
        for nodes in range(1, request.max_nodes + 1):
            if request.max_gpus is not None and gpn * nodes > request.max_gpus:
                if nodes == 1:
                    rejects.add("max-gpus", (gpu, gpn), gpu=gpu, gpu_count=gpn,
                                reason=f"{gpu} ×{gpn}: more GPUs per node than --max-gpus {request.max_gpus}")
                break
            ev = evals.get((gpu, gpn, nodes))
            if ev is None:
                try:
                    ev = model.evaluate(gpu, gpn, nodes)
                except (HardwareError, EstimateError) as exc:
                    ev = exc
                evals[(gpu, gpn, nodes)] = ev
            if isinstance(ev, GpuwiseError):
                rejects.add("no-estimate", (gpu,), gpu=gpu, reason=f"{gpu}: cannot estimate ({ev.message})")
                break
            if not ev.fits:
                g = rejects.add("no-fit", (gpu, gpn), gpu=gpu, gpu_count=gpn, capacity=ev.capacity_gib,
                                need={})
                g["nodes"].add(nodes)
                g["need"][nodes] = ev.per_gpu_memory_gib
                continue
            fitting_nodes += 1
            for bill_name, price in priced:
                considered += 1
                # issue 13: spot risk can differ per instance type and region (fetched provider bands)
                risk_p = spot.for_instance(cloud, region, itype).monthly_interruption_probability \
                    if bill_name == "spot" else None
                mkey = (cloud, itype, gpu, gpn, nodes, bill_name, round(price, 4), risk_p)
                cand = merged.get(mkey)
                if cand is not None:
                    cand.regions.append(region)
                    cand.zones += zones
                    continue
                cand = _Cand(cloud, region, itype, gpu, gpn, nodes, bill_name, price, zones, ev)
                _price_candidate(cand, request, spot, outcomes)
                merged[mkey] = cand
        if fitting_nodes:  # every fitting node count × each billing without a price
            for bill_name in unpriced:
                considered += fitting_nodes
                kind = "reserved-unknown" if bill_name.startswith("reserved") and od is not None else "no-price"
                group = rejects.groups.get((kind, cloud, bill_name))
                if group is None:
                    group = rejects.add(kind, (cloud, bill_name), cloud=cloud, billing=bill_name,
                                        reason=_no_price_reason(kind, cloud, bill_name))
                    group["offers"] -= 1
                group["offers"] += fitting_nodes

    estimated = [e for e in evals.values() if not isinstance(e, GpuwiseError)]
    workload_errors = [e for e in evals.values() if isinstance(e, EstimateError)]
    if not estimated and workload_errors:  # nothing could be estimated: a workload problem, not a plan
        from collections import Counter

        common = Counter(e.message for e in workload_errors).most_common(1)[0][0]
        raise next(e for e in workload_errors if e.message == common)

    feasible: list[_Cand] = []
    fits_any: list[_Cand] = []
    for cand in merged.values():
        fits_any.append(cand)
        if request.deadline_hours is not None and not _meets_deadline(cand, request):
            g = rejects.add("deadline", (cand.gpu, cand.gpn, cand.billing), gpu=cand.gpu, gpu_count=cand.gpn,
                            billing=cand.billing, best=None)
            g["nodes"].add(cand.nodes)
            if g["best"] is None or cand.hours < g["best"].hours:
                g["best"] = cand
            continue
        if request.budget_usd is not None and cand.cost > request.budget_usd:
            g = rejects.add("budget", (cand.gpu, cand.gpn, cand.billing), gpu=cand.gpu, gpu_count=cand.gpn,
                            billing=cand.billing, best=None)
            g["nodes"].add(cand.nodes)
            if g["best"] is None or cand.cost < g["best"].cost:
                g["best"] = cand
            continue
        feasible.append(cand)

    feasible.sort(key=_sort_key(request))
    front = _pareto(feasible)
    options = tuple(_to_option(i + 1, c, id(c) in front, _checkpoint_hours(c.ev, c.gpn * c.nodes, request, spot))
                    for i, c in enumerate(feasible))
    pareto = tuple(sorted((o for o in options if o.on_pareto_front), key=lambda o: (o.cost_usd, o.hours)))
    rejected = _finish_rejections(rejects, request)
    reason, nearest = (None, None) if options else _why_empty(request, fits_any, rejects, sites)
    spot_clouds = {c.cloud for c in merged.values() if c.billing == "spot"}
    assumptions = _assumptions(request, spot, spot_clouds)
    return Plan(workload=dict(model.describe()), request=request, options=options, pareto=pareto,
                rejected=rejected, explanation=tuple(explain(options, rejected, request)),
                reason=reason, nearest_miss=nearest, considered=considered, assumptions=assumptions)


def _min(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


def _price(billing: str, od: float | None, sp: float | None, cloud: str,
           reserved: dict[tuple[str, int], ReservedTerm | None]) -> float | None:
    if billing == "on-demand":
        return od
    if billing == "spot":
        return sp
    term = reserved.get((cloud, 1 if billing == "reserved-1y" else 3))
    if term is None or od is None:
        return None
    return od * (1 - term.discount)


def _no_price_reason(kind: str, cloud: str, billing: str) -> str:
    if kind == "reserved-unknown":
        return (f"{cloud} {billing}: discount unknown (null in gpuwise's reserved.yaml) — set your rate in "
                "<config dir>/reserved.yaml to plan reserved capacity")
    if billing == "spot":
        return f"{cloud} spot: no spot price (or no discount) in the catalog for these offers"
    return f"{cloud} {billing}: no price in the catalog for these offers (e.g. reservation-only types)"


def _price_candidate(cand: _Cand, request: PlanRequest, spot: SpotDefaults,
                     outcomes: dict[tuple[Any, ...], tuple[SpotOutcome, str]]) -> None:
    ev = cand.ev
    hours = ev.hours
    if cand.billing == "spot":
        risk = spot.for_instance(cand.cloud, cand.regions[0], cand.instance_type)
        key = (cand.cloud, cand.gpu, cand.gpn, cand.nodes, risk.monthly_interruption_probability)
        hit = outcomes.get(key)
        if hit is None:
            hit = _spot(ev, cand, request, spot)
            outcomes[key] = hit
        out, source = hit
        cand.out, cand.source = out, source
        hours = out.expected_hours
        if request.deadline_hours is not None:
            cand.p = p_meet_deadline(out, ev.hours, request.deadline_hours)
    elif request.deadline_hours is not None:
        cand.p = 1.0 if hours <= request.deadline_hours else 0.0
    cand.hours = hours
    cand.cost = cand.price * cand.nodes * hours


def _spot(ev: Evaluation, cand: _Cand, request: PlanRequest, spot: SpotDefaults) -> tuple[SpotOutcome, str]:
    risk = spot.for_instance(cand.cloud, cand.regions[0], cand.instance_type)
    if request.spot_mtbf_hours is not None:
        rate_node = 1 / request.spot_mtbf_hours
        source = f"--spot-mtbf {request.spot_mtbf_hours:g} h"
    elif risk.band is not None:  # issue 13: the provider's published band for this instance type
        rate_node = risk.rate_per_node_hour
        source = (f"{risk.instance_type} in {risk.region}: advisor band {risk.band} → "
                  f"{risk.monthly_interruption_probability:.0%}/month, MTBF {risk.mtbf_hours:,.0f} h "
                  f"({risk.confidence})")
    else:
        rate_node = risk.rate_per_node_hour
        source = (f"{risk.cloud} default {risk.monthly_interruption_probability:.0%}/month "
                  f"({_confidence_words(risk.confidence)})")
    c_hours = _checkpoint_hours(ev, cand.gpn * cand.nodes, request, spot)
    restart = (request.restart_hours if request.restart_hours is not None else spot.restart_hours) + c_hours
    out = spot_outcome(ev.hours, rate_per_hour=rate_node * cand.nodes, checkpoint_hours=c_hours,
                       restart_hours=restart)
    return out, source


def _checkpoint_hours(ev: Evaluation, total_gpus: int, request: PlanRequest, spot: SpotDefaults) -> float:
    """Checkpoint size / bandwidth; without a size, all GPU memory in use (conservative)."""
    ckpt_gib = request.checkpoint_gib
    if ckpt_gib is None:
        ckpt_gib = ev.checkpoint_gib if ev.checkpoint_gib is not None else ev.per_gpu_memory_gib * total_gpus
    bw = request.checkpoint_bandwidth_gb_s or spot.checkpoint_bandwidth_gb_s
    return ckpt_gib * BYTES_PER_GIB / (bw * BYTES_PER_GB) / 3600


def _meets_deadline(cand: _Cand, request: PlanRequest) -> bool:
    if cand.billing == "spot":
        return cand.p is not None and cand.p >= request.confidence
    return request.deadline_hours is None or cand.hours <= request.deadline_hours


def _sort_key(request: PlanRequest) -> Any:
    def key(c: _Cand) -> tuple[Any, ...]:
        tail = (c.cloud, c.instance_type, c.nodes, c.billing, c.regions[0])
        if request.objective == "time":
            return (round(c.hours, 9), round(c.cost, 6), *tail)
        if request.objective == "balanced":
            return (round(c.cost * c.hours, 6), round(c.cost, 6), *tail)
        return (round(c.cost, 6), round(c.hours, 9), *tail)

    return key


def _pareto(cands: Sequence[_Cand]) -> set[int]:
    """ids of candidates no other beats on both cost and hours (ties kept once)."""
    front: set[int] = set()
    best_hours = math.inf
    for c in sorted(cands, key=lambda c: (c.cost, c.hours)):
        if c.hours < best_hours:
            front.add(id(c))
            best_hours = c.hours
    return front


def _to_option(rank: int, c: _Cand, on_front: bool, checkpoint_hours: float) -> PlanOption:
    ev = c.ev
    regions = tuple(sorted(set(c.regions)))
    return PlanOption(
        rank=rank, cloud=c.cloud, region=regions[0], regions=regions, instance_type=c.instance_type,
        gpu=c.gpu, gpu_count=c.gpn, nodes=c.nodes, billing=c.billing,  # type: ignore[arg-type]
        price_usd_per_hour=c.price * c.nodes, hours=c.hours, cost_usd=c.cost, fits=True,
        p_meet_deadline=c.p, failure_free_hours=ev.hours, per_gpu_memory_gib=ev.per_gpu_memory_gib,
        capacity_gib=ev.capacity_gib, on_pareto_front=on_front,
        checkpoint_interval_hours=(None if c.out is None or math.isinf(c.out.interval_hours)
                                   else c.out.interval_hours),
        expected_interruptions=None if c.out is None else c.out.expected_interruptions,
        interruption_source=c.source, zones=c.zones, checkpoint_hours=checkpoint_hours,
    )


def _span(nodes: set[int]) -> str:
    lo, hi = min(nodes), max(nodes)
    if lo == hi:
        return "" if lo == 1 else f" on {lo} nodes"
    return f" on {lo}–{hi} nodes"


def _finish_rejections(rejects: _Rejects, request: PlanRequest) -> tuple[Rejection, ...]:
    out: list[tuple[tuple[Any, ...], Rejection]] = []
    for g in rejects.groups.values():
        kind = g["kind"]
        nodes = tuple(sorted(g["nodes"]))
        best: _Cand | None = g.get("best")
        if kind == "no-fit":
            top = max(nodes)
            need = g["need"][top]
            where = f" on {top} nodes" if len(nodes) > 1 or top > 1 else ""
            digits = 1 if round(need) == round(g["capacity"]) else 0
            reason = (f"{g['gpu']} ×{g['gpu_count']}{_span(g['nodes'])}: does not fit (needs {need:.{digits}f} "
                      f"GiB/GPU{where}, has {g['capacity']:.{digits}f})")
            sort_metric = need - g["capacity"]
            out.append(((_KIND_ORDER[kind], sort_metric), Rejection(
                kind=kind, reason=reason, offers=g["offers"], gpu=g["gpu"], gpu_count=g["gpu_count"], nodes=nodes)))
            continue
        if kind in ("deadline", "budget") and best is not None:
            setup = f"{best.gpu} ×{best.gpn}{_span(g['nodes'])} {best.billing}"
            if kind == "deadline":
                if best.billing == "spot" and best.p is not None \
                        and best.out is not None and best.out.failure_free_hours <= (request.deadline_hours or 0):
                    why = (f"{best.p:.0%} chance to finish within {fmt_hours(request.deadline_hours or 0)} "
                           f"(needs {request.confidence:.0%}; best {_label(best)})")
                else:
                    why = (f"misses the {fmt_hours(request.deadline_hours or 0)} deadline "
                           f"(fastest {fmt_hours(best.hours)}, {_label(best)})")
                metric = best.hours
            else:
                why = (f"over the {fmt_usd(request.budget_usd or 0)} budget "
                       f"(cheapest {fmt_usd(best.cost)}, {_label(best)})")
                metric = best.cost
            out.append(((_KIND_ORDER[kind], metric), Rejection(
                kind=kind, reason=f"{setup}: {why}", offers=g["offers"], gpu=best.gpu, gpu_count=best.gpn,
                nodes=nodes, billing=best.billing, cloud=best.cloud, example=_label(best),
                hours=best.hours, cost_usd=best.cost)))
            continue
        out.append(((_KIND_ORDER[kind], 0.0), Rejection(
            kind=kind, reason=g["reason"], offers=g["offers"], gpu=g.get("gpu"), gpu_count=g.get("gpu_count"),
            billing=g.get("billing"), cloud=g.get("cloud"))))
    out.sort(key=lambda x: (x[0], x[1].reason))
    return tuple(r for _, r in out)


def _why_empty(request: PlanRequest, fits_any: Sequence[_Cand], rejects: _Rejects,
               sites: dict[Any, Any]) -> tuple[str, str | None]:
    if not sites:
        return ("no offer matches the --cloud/--region/--gpu filters", None)
    if not fits_any:
        misses = [g for g in rejects.groups.values() if g["kind"] == "no-fit"]
        if not misses:
            return ("no offer can be priced for the requested billing models (see rejected)", None)
        best = min(misses, key=lambda g: g["need"][max(g["nodes"])] / g["capacity"])
        top = max(best["nodes"])
        total = best["gpu_count"] * top
        return ("the workload fits on no GPU setup in the catalog",
                f"closest: {total}×{best['gpu']} needs {best['need'][top]:.0f} GiB/GPU, has "
                f"{best['capacity']:.0f} (try --max-zero 3, --grad-ckpt full, a smaller --micro-batch, or more --max-nodes)")
    on_time = [c for c in fits_any if _meets_deadline(c, request)] if request.deadline_hours is not None \
        else list(fits_any)
    if not on_time:
        fastest = min(fits_any, key=lambda c: (c.hours, c.cost))
        return ("no option meets the deadline",
                f"fastest possible: {fmt_hours(fastest.hours)} on {_setup(fastest.gpu, fastest.gpn, fastest.nodes)} "
                f"({fastest.cloud} {fastest.instance_type}{f' ×{fastest.nodes}' if fastest.nodes > 1 else ''}, "
                f"{fastest.billing}, {fmt_usd(fastest.cost)})")
    cheapest = min(on_time, key=lambda c: (c.cost, c.hours))
    reason = "no option that meets the deadline is within the budget" if request.deadline_hours is not None \
        else "no option is within the budget"
    return (reason, f"cheapest possible: {fmt_usd(cheapest.cost)} on {_label(cheapest)} "
                    f"in {fmt_hours(cheapest.hours)}")


def _assumptions(request: PlanRequest, spot: SpotDefaults, clouds: set[str]) -> tuple[str, ...]:
    """The spot-model inputs that are defaults, for the clouds whose spot offers were priced."""
    if not clouds:
        return ()
    out = []
    if request.spot_mtbf_hours is None:
        for cloud in sorted(clouds):
            risk = spot.for_cloud(cloud)
            known = sum(1 for k in spot.instances if k[0] == cloud)  # issue 13: fetched per-instance bands
            where = f" where the {known} fetched per-instance bands do not apply" if known else ""
            out.append(f"{cloud} spot interruptions: {risk.monthly_interruption_probability:.0%}/month per "
                       f"instance{where} (MTBF {risk.mtbf_hours:,.0f} h, {_confidence_words(risk.confidence)}) — "
                       "override with --spot-mtbf")
    if request.checkpoint_bandwidth_gb_s is None:
        out.append(f"checkpoint bandwidth {spot.checkpoint_bandwidth_gb_s:g} GB/s (placeholder) — "
                   "override with --checkpoint-bandwidth")
    if request.restart_hours is None:
        out.append(f"restart {spot.restart_hours * 60:.0f} min + checkpoint reload (placeholder) — "
                   "override with --restart-time")
    return tuple(out)


def _confidence_words(confidence: str) -> str:
    """``low`` → "low confidence"; ``assumption`` → "a placeholder: no public figure"."""
    return "a placeholder: no public figure" if confidence == "assumption" else f"{confidence} confidence"
