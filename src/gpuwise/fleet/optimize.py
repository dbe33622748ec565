"""The reserved / spot / on-demand mix for a demand profile: a small MILP solved by HiGHS.

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

import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from gpuwise.base.interval import young_daly_waste
from gpuwise.errors import InputError, PlanError
from gpuwise.fleet.demand import Demand
from gpuwise.fleet.pricing import GpuPrices, PriceQuote, ReservedOption
from gpuwise.planner.spot import HOT_SPOT_POOL_MTBF_HOURS
from gpuwise.units import HOURS_PER_YEAR

log = logging.getLogger(__name__)

DEFAULT_SPOT_OVERHEAD = round(young_daly_waste(60 / 3600, HOT_SPOT_POOL_MTBF_HOURS), 3)
"""Extra GPU-hours lost per useful spot GPU-hour (7.5%). Source: the Young/Daly first-order
waste √(2C/M) (Young 1974, CACM 17(9); Daly 2006, FGCS 22(3) §3) for a synchronous 60 s
checkpoint and a "hot" spot pool with a 6 h node MTBF: √(120/21600) = 7.5%. At AWS Spot Advisor's
<5%–20% monthly interruption bands the same formula gives 0.15–0.32%, so 7.5% is a deliberately
cautious planning default; set ``spot_overhead`` from your own preemption history."""

Billing = str  # "reserved" | "spot" | "on-demand"


@dataclass(frozen=True)
class FleetOptions:
    """Knobs and caps of the fleet optimizer."""

    spot_overhead: float = DEFAULT_SPOT_OVERHEAD
    """Extra GPU-hours per useful spot GPU-hour lost to interruptions (0.075 = 7.5%)."""
    spot_capacity_gpus: Mapping[str, float] = field(default_factory=dict)
    """Most GPUs on spot at once, per GPU model; a model not listed has no limit."""
    budget_usd: float | None = None
    """Most the whole profile may cost."""
    monthly_budget_usd: float | None = None
    """Most any calendar month of the profile may cost (all GPU models together)."""
    max_commitment_usd: float | None = None
    """Most that all reservations may commit to, over their full terms."""
    max_reserved_gpus: int | None = None
    """Most GPUs reserved in total."""
    terms: tuple[int, ...] = (1, 3)
    """Reservation terms allowed (years)."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.spot_overhead) and 0 <= self.spot_overhead <= 10):
            raise InputError(
                f"spot overhead {self.spot_overhead!r} is not a fraction in [0, 10]",
                hint="give e.g. 0.075 for 7.5% extra GPU-hours on spot",
            )
        for gpu, cap in self.spot_capacity_gpus.items():
            if not (math.isfinite(cap) and cap >= 0):
                raise InputError(
                    f"spot capacity for {gpu} must be a number of GPUs ≥ 0, got {cap!r}",
                    hint="give e.g. spot_capacity_gpus={'H100': 32}",
                )
        for name in ("budget_usd", "monthly_budget_usd", "max_commitment_usd"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise InputError(
                    f"{name.replace('_', ' ')} must be a finite amount ≥ 0, got {value!r}",
                    hint="give a dollar amount such as 250000",
                )
        if self.max_reserved_gpus is not None and self.max_reserved_gpus < 0:
            raise InputError("the reserved-GPU cap must be ≥ 0", hint="give a whole number of GPUs")
        if not self.terms or any(t not in (1, 3) for t in self.terms):
            raise InputError(
                f"terms {self.terms!r}: only 1 and 3 years exist", hint="use 1, 3 or both"
            )


@dataclass(frozen=True)
class Commitment:
    """Reserved GPUs to buy."""

    gpu: str
    """GPU model."""
    cloud: str
    """Cloud to buy from."""
    term_years: int
    """1 or 3."""
    count: int
    """GPUs reserved."""
    usd_per_gpu_hour: float
    """Effective hourly price per reserved GPU."""
    discount: float
    """Fraction off on-demand."""
    cost_usd: float
    """What these reservations cost over the profile's hours."""
    commitment_usd: float
    """Contract value over the full term (count × price × term hours)."""
    source: str
    """Where the discount comes from."""


@dataclass(frozen=True)
class MonthCost:
    """One calendar month's cost by billing type."""

    month: str
    """``YYYY-MM``."""
    hours: int
    """Hours of the profile in this month."""
    reserved_usd: float
    """Reservations (paid whether used or not)."""
    spot_usd: float
    """Spot GPU-hours, interruption overhead included."""
    on_demand_usd: float
    """On-demand GPU-hours."""
    total_usd: float
    """Sum of the three."""


@dataclass(frozen=True)
class GpuBreakdown:
    """How one GPU model's demand is served."""

    gpu: str
    """GPU model."""
    demand_gpu_hours: float
    """GPU-hours wanted (firm + interruptible)."""
    firm_gpu_hours: float
    """Of which non-interruptible."""
    peak_gpus: float
    """Largest hourly demand."""
    reserved_gpus: int
    """GPUs reserved (all options)."""
    reserved_used_gpu_hours: float
    """Reserved GPU-hours that served demand."""
    reserved_utilization: float | None
    """Used / paid reserved GPU-hours; None when nothing is reserved."""
    spot_gpu_hours: float
    """GPU-hours bought on spot, overhead included."""
    on_demand_gpu_hours: float
    """GPU-hours bought on demand."""
    cost_usd: float
    """Total cost for this model."""
    on_demand_only_cost_usd: float
    """Cost if every hour were on demand."""
    on_demand: PriceQuote
    """On-demand price used."""
    spot: PriceQuote | None
    """Spot price used (None: no spot, or spot with overhead not cheaper than on-demand)."""
    reserved_unavailable: tuple[str, ...]
    """Clouds/terms with no known reserved discount (not considered)."""


@dataclass(frozen=True)
class Scenario:
    """The plan's commitments under changed demand or spot prices."""

    name: str
    """What changed, e.g. ``demand -20%``."""
    cost_usd: float
    """Cost with the plan's commitments kept, hourly split redone."""
    on_demand_only_cost_usd: float
    """All-on-demand cost in the scenario."""
    savings_fraction: float
    """1 − cost / on-demand-only cost."""
    reserved_utilization: float | None
    """Reservation utilization in the scenario."""
    reoptimized_cost_usd: float | None
    """Cost if the commitments were chosen for this scenario (None: infeasible under the caps)."""


@dataclass(frozen=True)
class Solution:
    """Reserved counts per (GPU, option) and what solving took."""

    counts: dict[tuple[str, int], int]
    """(gpu, index into that GPU's ``reserved`` options) → GPUs reserved."""
    objective_usd: float
    """Cost the solver reports."""
    seconds: float
    """Wall time of building and solving the model."""
    variables: int
    """Model columns."""
    constraints: int
    """Model rows."""


@dataclass(frozen=True)
class FleetPlan:
    """The recommended mix and what it saves."""

    commitments: tuple[Commitment, ...]
    """Reservations to buy (empty: reserve nothing)."""
    cost_usd: float
    """Cost of the plan over the profile's hours."""
    on_demand_only_cost_usd: float
    """Cost if everything ran on demand."""
    savings_fraction: float
    """1 − cost / on-demand-only cost."""
    best_single_billing: str
    """The cheapest plan that uses one billing type for everything."""
    best_single_cost_usd: float
    """Its cost."""
    savings_vs_best_single_fraction: float
    """1 − cost / best single billing cost."""
    single_billing_costs_usd: dict[str, float | None]
    """Cost per single billing type (None: not possible, e.g. spot with firm demand)."""
    monthly: tuple[MonthCost, ...]
    """Cost per calendar month by billing type."""
    reserved_utilization: float | None
    """Used / paid reserved GPU-hours over all models; None when nothing is reserved."""
    per_gpu: tuple[GpuBreakdown, ...]
    """Breakdown per GPU model."""
    sensitivity: tuple[Scenario, ...]
    """Demand ±20% and spot price rises, commitments kept."""
    hours: int
    """Hours in the profile."""
    spot_overhead: float
    """Interruption overhead used."""
    solver: Solution
    """Solver statistics."""
    notes: tuple[str, ...]
    """Things the user should know (unavailable reservations, assumptions)."""
    extrapolated: bool = False
    """A proposed reservation's term is longer than the demand profile: its cost and saving assume
    the profile repeats for the whole term (said in ``notes``)."""


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
        eff = prices.spot.usd_per_gpu_hour * (1 + options.spot_overhead)
        spot_eff = eff if eff < od else None
    cap = options.spot_capacity_gpus.get(prices.gpu, math.inf)
    cap_useful = cap / (1 + options.spot_overhead) if spot_eff is not None else 0.0
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
        out["spot"][g] = spot_useful * (1 + options.spot_overhead)
        out["od"][g] = od
        out["spot_usd"][g] = spot_useful * (curve.spot_eff or 0.0)
        out["od_usd"][g] = od * curve.od
    return _Dispatch(
        out["used"], out["spot"], out["od"], out["spot_usd"], out["od_usd"], res_rate, res_gpus
    )


# ---------------------------------------------------------------- the MILP


def solve(demand: Demand, prices: Mapping[str, GpuPrices], options: FleetOptions) -> Solution:
    """Reserved counts minimizing total cost under the caps (HiGHS via ``scipy.optimize.milp``)."""
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
    res = milp(
        np.array(cols_c),
        constraints=LinearConstraint(a, np.array(lbs), np.array(ubs)),
        integrality=np.array(integrality),
        bounds=Bounds(np.zeros(n), np.array(upper)),
        options={"mip_rel_gap": 1e-9, "time_limit": 60.0},
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


# ---------------------------------------------------------------- reporting


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
        need = float(demand.interruptible[i].max()) * (1 + options.spot_overhead)
        if p.spot is None or float(demand.firm[i].sum()) > 0 or need > cap + 1e-9:
            spot = math.nan
            break
        spot += (
            p.spot.usd_per_gpu_hour
            * (1 + options.spot_overhead)
            * float(demand.interruptible[i].sum())
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
    sol = solve(demand, prices, options)
    d = dispatch(demand, prices, sol.counts, options)
    cost = _total(d, demand.hours)
    singles = _single_billing(demand, prices, options)
    od_cost = singles["on-demand"] or 0.0
    feasible = {k: v for k, v in singles.items() if v is not None}
    best_name = min(feasible, key=lambda k: feasible[k])
    commitments = []
    for (gpu, i), n in sorted(sol.counts.items()):
        o: ReservedOption = prices[gpu].reserved[i]
        commitments.append(
            Commitment(
                gpu,
                o.cloud,
                o.term_years,
                n,
                o.usd_per_gpu_hour,
                o.discount,
                n * o.usd_per_gpu_hour * demand.hours,
                n * o.usd_per_gpu_hour * HOURS_PER_YEAR * o.term_years,
                o.source,
            )
        )
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
                f"{gpu}: spot with {options.spot_overhead:.1%} interruption overhead is not "
                "cheaper than on-demand; spot not used"
            )
    longest = max((c.term_years for c in commitments), default=0)
    extrapolated = longest * HOURS_PER_YEAR > demand.hours
    if extrapolated:
        notes.insert(
            0,
            f"extrapolated: a {longest}-year reservation is proposed from {_span(demand.hours)} of "
            "demand; its saving assumes this demand repeats for the whole term. Give a longer "
            "demand history" + (", or allow only 1-year terms" if longest > 1 else ""),
        )
    scenarios: list[Scenario] = []
    if sensitivity:
        for factor in (0.8, 1.2):
            scenarios.append(
                _scenario(
                    f"demand {factor - 1:+.0%}",
                    demand.scaled(factor),
                    prices,
                    sol.counts,
                    options,
                    reoptimize=True,
                )
            )
        for factor in (1.25, 1.5, 2.0):
            scenarios.append(
                _scenario(
                    f"spot price {factor - 1:+.0%}",
                    demand,
                    _with_spot_factor(prices, factor),
                    sol.counts,
                    options,
                    reoptimize=False,
                )
            )
    best_cost = feasible[best_name]
    return FleetPlan(
        commitments=tuple(commitments),
        cost_usd=cost,
        on_demand_only_cost_usd=od_cost,
        savings_fraction=1 - cost / od_cost if od_cost > 0 else 0.0,
        best_single_billing=best_name,
        best_single_cost_usd=best_cost,
        savings_vs_best_single_fraction=1 - cost / best_cost if best_cost > 0 else 0.0,
        single_billing_costs_usd=singles,
        monthly=tuple(_monthly(demand, d)),
        reserved_utilization=_utilization(d, demand.hours),
        per_gpu=tuple(per_gpu),
        sensitivity=tuple(scenarios),
        hours=demand.hours,
        spot_overhead=options.spot_overhead,
        solver=sol,
        notes=tuple(notes),
        extrapolated=extrapolated,
    )


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
    d = dispatch(demand, prices, plan.solver.counts, options)
    return {
        "reserved_used": d.reserved_used.sum(axis=0),
        "reserved_paid": np.full(demand.hours, float(d.reserved_gpus.sum())),
        "spot": d.spot_gpu_hours.sum(axis=0),
        "on_demand": d.on_demand.sum(axis=0),
    }
