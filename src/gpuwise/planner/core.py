"""The planner: join a workload model with catalog offers, price every way to run the job, rank.

:func:`plan_offers` is pure (offers, model, request in; :class:`Plan` out) and reads as its steps:

1. **sites** (:mod:`~gpuwise.planner.sites`): one per cloud × region × instance type, with the price
   you can get there, the zone that gives it, and the instance's network;
2. **settings + evaluate** (here): per site and node count, the model finds the job's cheapest
   settings that fit (:mod:`~gpuwise.planner.settings`) and their failure-free hours;
3. **price** (:mod:`~gpuwise.planner.pricing`): per billing model, expected hours and cost (spot:
   interruptions, checkpoints, the wait for capacity), plus the fixed cost of starting
   (:mod:`~gpuwise.planner.startup`); rows that differ only by region at the same price are merged;
4. **filter** (here): deadline and budget;
5. **rank** (:mod:`~gpuwise.planner.rank`): by the objective (cost: the cheapest; speed only when
   asked or when the deadline's confidence needs it), with the Pareto front.

What is dropped on the way is grouped into :class:`~gpuwise.planner.values.Rejection` s
(:mod:`~gpuwise.planner.rejections`); the defaults and placeholders the plan rests on are listed by
:mod:`~gpuwise.planner.assumptions`.
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Sequence
from functools import partial
from typing import NamedTuple

from gpuwise.catalog.offer import Offer
from gpuwise.catalog.reserved import ReservedTerm
from gpuwise.errors import EstimateError, HardwareError
from gpuwise.planner.assumptions import assumptions, recipe
from gpuwise.planner.candidate import Candidate, Evaluated, meets_deadline
from gpuwise.planner.explain import explain
from gpuwise.planner.model import Evaluation, WorkloadModel
from gpuwise.planner.network import InstanceNetwork
from gpuwise.planner.pricing import price_all
from gpuwise.planner.rank import choose, pareto, sort_key, to_options
from gpuwise.planner.rejections import Rejects, finish_rejections, why_empty
from gpuwise.planner.settings import BatchSplitError
from gpuwise.planner.sites import Site, build_sites
from gpuwise.planner.spot import SpotDefaults
from gpuwise.planner.startup import StartupCosts, load_startup_defaults
from gpuwise.planner.values import Plan, PlanRequest, RejectKind


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
    rejects = Rejects()
    sites = build_sites(offers, request, clouds, gpus)
    evaluated, evals = _evaluate(sites, model, request, rejects)
    candidates, considered = price_all(evaluated, request, spot, reserved, costs, rejects)
    feasible = _filter(candidates, request, rejects)
    feasible.sort(key=sort_key(request))
    ranking_note = choose(feasible, request)
    front = pareto(feasible)
    options = to_options(feasible, front, costs, request, request.spot_mtbf_hours is not None)
    front_options = tuple(
        sorted((o for o in options if o.on_pareto_front), key=lambda o: (o.cost_usd, o.hours))
    )
    rejected = finish_rejections(rejects, request)
    reason, nearest = (None, None) if options else why_empty(request, candidates, rejects, sites)
    spot_clouds = {c.site.cloud for c in candidates if c.billing == "spot"}
    workload = dict(model.describe())
    return Plan(
        workload=workload,
        request=request,
        options=options,
        pareto=front_options,
        rejected=rejected,
        explanation=(() if ranking_note is None else (ranking_note,))
        + tuple(explain(options, rejected, request)),
        ranking_note=ranking_note,
        reason=reason,
        nearest_miss=nearest,
        considered=considered,
        assumptions=recipe(workload) + assumptions(request, spot, spot_clouds, costs, sites),
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


class _Reject(NamedTuple):
    """A rejection the node loop found for one GPU setup, replayed for every site with it."""

    kind: RejectKind
    nodes: int | None = None
    global_batch: int = 0
    """batch: the plan's global batch."""
    message: str = ""
    """no-estimate: why."""
    capacity_gib: float = 0.0
    """no-fit: the GPU's memory."""
    need_gib: float = 0.0
    """no-fit: the least memory any setting needs."""
    searched: bool = False
    """no-fit: more than one setting was tried."""
    kept_free: bool = False
    """no-fit: ``capacity_gib`` is what the memory headroom leaves."""


def _evaluate(
    sites: Sequence[Site], model: WorkloadModel, request: PlanRequest, rejects: Rejects
) -> tuple[list[Evaluated], list[Evaluation | HardwareError | EstimateError]]:
    """Every site × node count whose job fits, with its settings; the rest become rejections.

    Sites with the same GPUs per node and network get the same answers (the model sees nothing
    else), so the node loop runs once per such setup and is replayed for each site; rejections are
    counted per (setup, node count) and added to their groups once at the end.
    """
    out: list[Evaluated] = []
    seen: dict[tuple[str, int, int, float], Evaluation | HardwareError | EstimateError] = {}
    setups: dict[
        tuple[str, int, InstanceNetwork], tuple[list[tuple[int, Evaluation]], list[_Reject]]
    ] = {}
    pending: Counter[tuple[str, int, _Reject]] = Counter()
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
        skey = (site.gpu, gpn, site.network)
        setup = setups.get(skey)
        if setup is None:
            setup = setups[skey] = _node_loop(site, gpn, model, request, seen)
        fits, rejected = setup
        out.extend(Evaluated(site, nodes, ev) for nodes, ev in fits)
        for r in rejected:
            pending[(site.gpu, gpn, r)] += 1
    for (gpu, gpn, r), n in pending.items():
        if r.kind == "max-gpus":
            rejects.add(
                "max-gpus",
                gpu=gpu,
                gpu_count=gpn,
                count=n,
                reason=partial(
                    str.format,
                    "{} ×{}: more GPUs per node than the {} GPUs allowed in total",
                    gpu,
                    gpn,
                    request.max_gpus,
                ),
            )
        elif r.kind == "batch":
            rejects.add(
                "batch",
                gpu=gpu,
                gpu_count=gpn,
                nodes=r.nodes,
                count=n,
                reason=partial(
                    str.format,
                    "{} ×{}: the data-parallel GPUs do not divide the plan's global batch of {}",
                    gpu,
                    gpn,
                    r.global_batch,
                ),
            )
        elif r.kind == "no-estimate":
            rejects.add(
                "no-estimate",
                gpu=gpu,
                count=n,
                reason=partial(str.format, "{}: cannot estimate ({})", gpu, r.message),
            )
        else:
            g = rejects.add(
                "no-fit",
                gpu=gpu,
                gpu_count=gpn,
                capacity_gib=r.capacity_gib,
                nodes=r.nodes,
                count=n,
            )
            g.need_gib[r.nodes or 1] = r.need_gib
            g.searched = g.searched or r.searched
            g.kept_free = g.kept_free or r.kept_free
    results = list(seen.values())
    errors = [e for e in results if isinstance(e, EstimateError)]
    if errors and not any(isinstance(e, Evaluation) for e in results):
        # nothing could be estimated: a workload problem, not a plan
        common = Counter(e.message for e in errors).most_common(1)[0][0]
        raise next(e for e in errors if e.message == common)
    return out, results


def _node_loop(
    site: Site,
    gpn: int,
    model: WorkloadModel,
    request: PlanRequest,
    seen: dict[tuple[str, int, int, float], Evaluation | HardwareError | EstimateError],
) -> tuple[list[tuple[int, Evaluation]], list[_Reject]]:
    """One GPU setup on 1..max_nodes nodes: the node counts that fit, and the rejections."""
    fits: list[tuple[int, Evaluation]] = []
    rejected: list[_Reject] = []
    for nodes in range(1, request.max_nodes + 1):
        if request.max_gpus is not None and gpn * nodes > request.max_gpus:
            if nodes == 1:
                rejected.append(_Reject("max-gpus"))
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
            rejected.append(_Reject("batch", nodes, global_batch=ev.global_batch))
            continue
        if not isinstance(ev, Evaluation):
            rejected.append(_Reject("no-estimate", message=ev.message))
            break
        if not ev.fits:
            rejected.append(
                _Reject(
                    "no-fit",
                    nodes,
                    capacity_gib=ev.capacity_gib if ev.limit_gib is None else ev.limit_gib,
                    need_gib=ev.per_gpu_memory_gib,
                    searched=ev.evaluated > 1,
                    kept_free=ev.limit_gib is not None,
                )
            )
            continue
        fits.append((nodes, ev))
    return fits, rejected


# -- 3. price: gpuwise.planner.pricing ---------------------------------------------------------------


# -- 4. filter --------------------------------------------------------------------------------------


def _filter(cands: Sequence[Candidate], request: PlanRequest, rejects: Rejects) -> list[Candidate]:
    feasible = []
    for c in cands:
        if not meets_deadline(c, request):
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


# -- rejections and empty plans -------------------------------------------------------------------
