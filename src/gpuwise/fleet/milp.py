"""The MILP behind :func:`~gpuwise.fleet.optimize.plan_fleet`: cost curves, the hourly split for
fixed reservations, and the reserved counts that minimize cost (HiGHS).

**Model.** For each GPU model g and hour h there is firm demand F_h (never on spot) and
interruptible demand X_h. Decisions: whole reserved GPUs R_{g,o} per reservation option o
(cloud, 1y/3y term), and each hour's split of what reservations do not cover between spot and
on-demand. Spot needs (1 + overhead) GPU-hours per useful GPU-hour (work lost to preemption),
and at most ``spot capacity`` GPUs run on spot at once.

**Why it is small.** For a fixed total reservation R the best hourly split is closed-form:
reserved GPUs serve firm work first (it has no cheaper alternative), then interruptible work; the
interruptible rest goes to spot up to its capacity when spot (with overhead) is cheaper, the rest
to on-demand. Any other order costs at least as much. The hourly cost C(R) of that split is
convex and piecewise linear in R, and it only depends on the *duration curves* of
A_h = F_h + max(X_h − cap, 0) and D_h = F_h + X_h::

    C(R) = C(0) − p_od·Σ_h min(A_h, R) − p_spot·Σ_h (min(D_h, R) − min(A_h, R))

so sorting A and D once gives C(k) for every whole k in O(H log H). The MILP then has one
integer variable per (GPU, option) and one epigraph variable z per GPU (per GPU and month when a
monthly budget applies), with one cut per breakpoint of C: z ≥ C(k) + (C(k+1) − C(k))·(R − k).
At whole R the cuts are exact. Budget, monthly-budget and commitment caps are linear rows.

**Costs are over the profile's hours.** A 3-year reservation is costed at its hourly rate over the
profile (the profile is taken as representative of the whole term); its contract value over three
years is reported as ``commitment_usd``.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TypeVar

import numpy as np

from gpuwise.errors import PlanError
from gpuwise.fleet.demand import Demand
from gpuwise.fleet.plan_values import FleetOptions, MonthCost, Solution, resolve_spot_overhead
from gpuwise.fleet.pricing import GpuPrices
from gpuwise.units import HOURS_PER_YEAR

_T = TypeVar("_T")


# ---------------------------------------------------------------- cost curves


@dataclass(frozen=True)
class _Curve:
    """Per GPU model: the hourly cost C(k) of the best split with k reserved GPUs."""

    od: float
    spot_eff: float | None  # spot $/useful GPU-hour incl. overhead, None if not worth using
    cap_useful: float  # most useful GPU-hours per hour on spot
    peak: int  # smallest whole k with C(k) = C(peak) for all larger k


def _curve(prices: GpuPrices, options: FleetOptions) -> _Curve:
    od = prices.on_demand.usd_per_gpu_hour
    spot_eff: float | None = None
    if prices.spot is not None:
        eff = prices.spot.usd_per_gpu_hour * (1 + options.overhead)
        spot_eff = eff if eff < od else None
    cap = options.spot_capacity_gpus.get(prices.gpu, math.inf)
    cap_useful = cap / (1 + options.overhead) if spot_eff is not None else 0.0
    return _Curve(od, spot_eff, cap_useful, 0)


def _breakpoints(
    firm: np.ndarray, flex: np.ndarray, curve: _Curve
) -> tuple[np.ndarray, np.ndarray]:
    """A_h (demand that costs on-demand at the margin) and D_h (all demand), per hour."""
    d = firm + flex
    a = firm + np.maximum(flex - curve.cap_useful, 0.0) if curve.spot_eff is not None else d
    return a, d


def cost_curve(firm: np.ndarray, flex: np.ndarray, curve: _Curve, ks: np.ndarray) -> np.ndarray:
    """C(k) for each k in ``ks``: the hourly (non-reserved) cost with k reserved GPUs."""
    a, d = _breakpoints(firm, flex, curve)
    s = curve.spot_eff if curve.spot_eff is not None else curve.od
    c0 = curve.od * a.sum() + s * (d - a).sum()

    def sum_min(values: np.ndarray) -> np.ndarray:
        v = np.sort(values)
        csum = np.concatenate(([0.0], np.cumsum(v)))
        i = np.searchsorted(v, ks, side="left")  # values < k
        return csum[i] + ks * (len(v) - i)

    sa, sd = sum_min(a), sum_min(d)
    return np.asarray(c0 - curve.od * sa - s * (sd - sa), dtype=float)


def _candidates(firm: np.ndarray, flex: np.ndarray, curve: _Curve, peak: int) -> np.ndarray:
    """Whole reserved counts where C may bend: 0, the peak, and the whole numbers around each
    breakpoint A_h, D_h. Between two neighbours C is linear, so secants through them are exact
    at every whole R; with whole-GPU demand these are just the distinct demand levels."""
    a, d = _breakpoints(firm, flex, curve)
    pts = np.concatenate(([0.0, float(peak)], np.floor(a), np.ceil(a), np.floor(d), np.ceil(d)))
    return np.unique(np.clip(pts, 0.0, float(peak)))


# ---------------------------------------------------------------- dispatch for fixed reservations


@dataclass(frozen=True)
class _Dispatch:
    reserved_used: np.ndarray  # (G, H) useful GPU-hours served by reservations
    spot_gpu_hours: np.ndarray  # (G, H) incl. overhead
    on_demand: np.ndarray  # (G, H)
    spot_usd: np.ndarray  # (G, H)
    on_demand_usd: np.ndarray  # (G, H)
    reserved_usd_per_hour: np.ndarray  # (G,)
    reserved_gpus: np.ndarray  # (G,)


def dispatch(
    demand: Demand,
    prices: Mapping[str, GpuPrices],
    counts: Mapping[tuple[str, int], int],
    options: FleetOptions,
) -> _Dispatch:
    """The best hourly split for fixed reservations (closed form, see the module docstring)."""
    options, _ = resolve_spot_overhead(options, demand.gpus, prices)
    g_n, h_n = demand.firm.shape
    out = {k: np.zeros((g_n, h_n)) for k in ("used", "spot", "od", "spot_usd", "od_usd")}
    res_rate = np.zeros(g_n)
    res_gpus = np.zeros(g_n)
    for g, gpu in enumerate(demand.gpus):
        p = prices[gpu]
        curve = _curve(p, options)
        r = 0.0
        for (cg, i), n in counts.items():
            if cg == gpu and n:
                r += n
                res_rate[g] += n * p.reserved[i].usd_per_gpu_hour
        res_gpus[g] = r
        firm, flex = demand.firm[g], demand.interruptible[g]
        r_firm = np.minimum(firm, r)
        r_flex = np.minimum(flex, r - r_firm)
        rest = flex - r_flex
        spot_useful = (
            np.minimum(rest, curve.cap_useful) if curve.spot_eff is not None else np.zeros(h_n)
        )
        od = firm - r_firm + rest - spot_useful
        out["used"][g] = r_firm + r_flex
        out["spot"][g] = spot_useful * (1 + options.overhead)
        out["od"][g] = od
        out["spot_usd"][g] = spot_useful * (curve.spot_eff or 0.0)
        out["od_usd"][g] = od * curve.od
    return _Dispatch(
        out["used"], out["spot"], out["od"], out["spot_usd"], out["od_usd"], res_rate, res_gpus
    )


# ---------------------------------------------------------------- the MILP


def solve(demand: Demand, prices: Mapping[str, GpuPrices], options: FleetOptions) -> Solution:
    """Reserved counts minimizing total cost under the caps (HiGHS via ``scipy.optimize.milp``)."""
    options, _ = resolve_spot_overhead(options, demand.gpus, prices)
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_matrix

    t0 = time.perf_counter()
    months, month_of = demand.month_index()
    per_month = options.monthly_budget_usd is not None
    groups = (
        [np.flatnonzero(month_of == m) for m in range(len(months))]
        if per_month
        else [np.arange(demand.hours)]
    )
    hours_in = [len(ix) for ix in groups]

    cols_c: list[float] = []  # objective per column
    integrality: list[int] = []
    upper: list[float] = []
    col_of: dict[tuple[str, int], int] = {}
    commit_row: list[float] = []  # contract value per column (for max_commitment)
    reserved_row: list[float] = []  # 1 per reserved column
    month_cost_cols: list[dict[int, float]] = [dict() for _ in groups]  # month → {col: coef}
    const_month = np.zeros(len(groups))
    rows: list[tuple[dict[int, float], float, float]] = []  # (coefs, lb, ub)

    for g, gpu in enumerate(demand.gpus):
        p = prices[gpu]
        curve = _curve(p, options)
        firm, flex = demand.firm[g], demand.interruptible[g]
        opts = [i for i, o in enumerate(p.reserved) if o.term_years in options.terms]
        peak = math.ceil(float((firm + flex).max()) - 1e-9) if demand.hours else 0
        if not opts or peak == 0:
            for m, ix in enumerate(groups):
                const_month[m] += float(cost_curve(firm[ix], flex[ix], curve, np.array([0.0]))[0])
            continue
        r_cols = []
        for i in opts:
            col_of[(gpu, i)] = len(cols_c)
            r_cols.append(len(cols_c))
            rate = p.reserved[i].usd_per_gpu_hour
            cols_c.append(rate * demand.hours)
            integrality.append(1)
            upper.append(float(peak))
            commit_row.append(rate * HOURS_PER_YEAR * p.reserved[i].term_years)
            reserved_row.append(1.0)
            for m, n_h in enumerate(hours_in):
                month_cost_cols[m][col_of[(gpu, i)]] = rate * n_h
        # total reserved for this GPU never needs to pass its peak
        rows.append(({c: 1.0 for c in r_cols}, -np.inf, float(peak)))
        ks = _candidates(firm, flex, curve, peak)
        for m, ix in enumerate(groups):
            z = len(cols_c)
            cols_c.append(1.0)
            integrality.append(0)
            upper.append(np.inf)
            commit_row.append(0.0)
            reserved_row.append(0.0)
            month_cost_cols[m][z] = 1.0
            c = cost_curve(firm[ix], flex[ix], curve, ks)
            slopes = np.diff(c) / np.diff(ks)
            keep = np.ones(len(slopes), dtype=bool)
            keep[1:] = ~np.isclose(slopes[1:], slopes[:-1], rtol=1e-12, atol=1e-9)
            for k in np.flatnonzero(keep):
                # z − slope·ΣR ≥ C(k) − slope·k
                coefs = {z: 1.0, **{rc: -float(slopes[k]) for rc in r_cols}}
                rows.append((coefs, float(c[k] - slopes[k] * ks[k]), np.inf))
            rows.append(({z: 1.0}, float(c[-1]), np.inf))

    n = len(cols_c)
    if options.budget_usd is not None:
        coefs = {j: cols_c[j] for j in range(n)}
        rows.append((coefs, -np.inf, options.budget_usd - float(const_month.sum())))
    if per_month:
        assert options.monthly_budget_usd is not None
        for m in range(len(groups)):
            rows.append(
                (month_cost_cols[m], -np.inf, options.monthly_budget_usd - float(const_month[m]))
            )
    if options.max_commitment_usd is not None:
        rows.append(
            (
                {j: commit_row[j] for j in range(n) if commit_row[j]},
                -np.inf,
                options.max_commitment_usd,
            )
        )
    if options.max_reserved_gpus is not None:
        rows.append(
            (
                {j: 1.0 for j in range(n) if reserved_row[j]},
                -np.inf,
                float(options.max_reserved_gpus),
            )
        )

    const = float(const_month.sum())
    if n == 0:
        for coefs, lb, ub in rows:
            if not coefs and not (lb <= 0 <= ub):
                raise _infeasible(demand, prices, options)
        return Solution({}, const, time.perf_counter() - t0, 0, len(rows))
    ri, ci, vals, lbs, ubs = [], [], [], [], []
    for r, (coefs, lb, ub) in enumerate(rows):
        for j, v in coefs.items():
            ri.append(r)
            ci.append(j)
            vals.append(v)
        lbs.append(lb)
        ubs.append(ub)
    a = coo_matrix((vals, (ri, ci)), shape=(len(rows), n)).tocsr()
    res = _interruptible(
        lambda: milp(
            np.array(cols_c),
            constraints=LinearConstraint(a, np.array(lbs), np.array(ubs)),
            integrality=np.array(integrality),
            bounds=Bounds(np.zeros(n), np.array(upper)),
            options={"mip_rel_gap": 1e-9, "time_limit": 60.0},
        )
    )
    if res.status == 2:
        raise _infeasible(demand, prices, options)
    if res.x is None:
        raise PlanError(
            f"the solver stopped without a plan ({res.message})",
            hint="loosen the caps or shorten the profile, and report this if it persists",
        )
    counts = {key: round(res.x[j]) for key, j in col_of.items() if round(res.x[j]) > 0}
    # the cost of the whole counts, not HiGHS's objective (which carries its integrality tolerance)
    objective = _total(dispatch(demand, prices, counts, options), demand.hours)
    return Solution(counts, objective, time.perf_counter() - t0, n, len(rows))


def _interruptible(call: Callable[[], _T]) -> _T:
    """``call()`` (a HiGHS solve) in a worker thread, so that Ctrl-C interrupts the caller at once.

    HiGHS runs in C without looking at signals, so a KeyboardInterrupt used to wait for the
    solve to end (up to its 60 s limit). It releases the GIL, so the main thread can wait on the
    worker and take the interrupt; the abandoned solve finishes in the background and its
    result is dropped (a process that exits, like the CLI, ends it).
    """
    if threading.current_thread() is not threading.main_thread():
        return call()  # signals are delivered to the main thread only
    box: list[_T] = []
    failure: list[BaseException] = []

    def work() -> None:
        try:
            box.append(call())
        except BaseException as exc:  # handed to the caller below
            failure.append(exc)

    worker = threading.Thread(target=work, name="gpuwise-highs", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.05)  # a KeyboardInterrupt is raised here, in the caller's thread
    if failure:
        raise failure[0]
    return box[0]


def _infeasible(
    demand: Demand, prices: Mapping[str, GpuPrices], options: FleetOptions
) -> PlanError:
    uncapped = replace(options, budget_usd=None, monthly_budget_usd=None)
    best = solve(demand, prices, uncapped)
    d = dispatch(demand, prices, best.counts, uncapped)
    parts = []
    if options.budget_usd is not None:
        parts.append(
            f"budget_usd={options.budget_usd:,.0f} (the cheapest plan costs ${best.objective_usd:,.0f})"
        )
    if options.monthly_budget_usd is not None:
        months = _monthly(demand, d)
        worst = max(months, key=lambda mc: mc.total_usd)
        parts.append(
            f"monthly_budget_usd={options.monthly_budget_usd:,.0f} (the cheapest plan's dearest "
            f"month, {worst.month}, costs ${worst.total_usd:,.0f})"
        )
    what = " and ".join(parts) or "the caps"
    return PlanError(
        f"no plan meets {what}",
        hint="raise the budget, lower the demand, or allow more reservations/spot",
    )


# ---------------------------------------------------------------- closed form without caps


def solve_uncapped(
    demand: Demand, prices: Mapping[str, GpuPrices], options: FleetOptions
) -> dict[tuple[str, int], int]:
    """Without caps only the cheapest option per GPU matters: reserve the k-th GPU while the
    on-demand/spot cost it saves over the profile exceeds its reserved cost."""
    options, _ = resolve_spot_overhead(options, demand.gpus, prices)
    counts: dict[tuple[str, int], int] = {}
    for g, gpu in enumerate(demand.gpus):
        p = prices[gpu]
        opts = [i for i, o in enumerate(p.reserved) if o.term_years in options.terms]
        if not opts:
            continue
        best = min(opts, key=lambda i: p.reserved[i].usd_per_gpu_hour)
        curve = _curve(p, options)
        peak = math.ceil(float(demand.total[g].max()) - 1e-9)
        ks = _candidates(demand.firm[g], demand.interruptible[g], curve, peak)
        c = cost_curve(demand.firm[g], demand.interruptible[g], curve, ks)
        saving_per_gpu = -np.diff(c) / np.diff(ks)  # non-increasing: C is convex
        worth = np.flatnonzero(
            saving_per_gpu > p.reserved[best].usd_per_gpu_hour * demand.hours * (1 + 1e-12)
        )
        k = int(ks[worth[-1] + 1]) if len(worth) else 0
        if k:
            counts[(gpu, best)] = k
    return counts


# ---------------------------------------------------------------- costs of a split


def _monthly(demand: Demand, d: _Dispatch) -> list[MonthCost]:
    labels, month_of = demand.month_index()
    out = []
    for m, label in enumerate(labels):
        ix = month_of == m
        h = int(ix.sum())
        res = float(d.reserved_usd_per_hour.sum()) * h
        spot = float(d.spot_usd[:, ix].sum())
        od = float(d.on_demand_usd[:, ix].sum())
        out.append(MonthCost(label, h, res, spot, od, res + spot + od))
    return out


def _total(d: _Dispatch, hours: int) -> float:
    return float(d.reserved_usd_per_hour.sum() * hours + d.spot_usd.sum() + d.on_demand_usd.sum())
