"""The fleet MILP against brute force, the known cases, and the caps."""

from __future__ import annotations

import datetime as dt
import itertools
import math

import numpy as np
import pytest

from gpuwise.errors import PlanError
from gpuwise.fleet.demand import Demand
from gpuwise.fleet.optimize import (
    FleetOptions,
    _curve,
    cost_curve,
    dispatch,
    plan_fleet,
    solve,
    solve_uncapped,
)
from gpuwise.fleet.pricing import GpuPrices, PriceQuote, ReservedOption
from gpuwise.units import HOURS_PER_YEAR


def prices(gpu: str, od: float, spot: float | None, reserved: list[tuple[int, float]]) -> GpuPrices:
    opts = tuple(
        ReservedOption(f"c{i}", term, rate, 1 - rate / od, "test")
        for i, (term, rate) in enumerate(reserved)
    )
    return GpuPrices(
        gpu,
        PriceQuote(od, "c0", "r"),
        None if spot is None else PriceQuote(spot, "c0", "r"),
        opts,
        (),
    )


def demand(
    firm: list[list[float]],
    flex: list[list[float]],
    gpus: tuple[str, ...] = ("H100",),
    start: dt.datetime = dt.datetime(2026, 1, 1),
) -> Demand:
    return Demand(start, gpus, np.array(firm, dtype=float), np.array(flex, dtype=float), "test")


# ---------------------------------------------------------------- brute force


def brute_force(d: Demand, pr: dict[str, GpuPrices], opt: FleetOptions) -> float:
    """Enumerate every whole reservation and every whole hourly split; min cost under the caps."""
    months, month_of = d.month_index()
    per_gpu_opts = [
        [(g, i) for i, o in enumerate(pr[gpu].reserved) if o.term_years in opt.terms]
        for g, gpu in enumerate(d.gpus)
    ]
    keys = [k for opts in per_gpu_opts for k in opts]
    peaks = [math.ceil(d.total[g].max()) for g in range(len(d.gpus))]
    best = math.inf
    for combo in itertools.product(*[range(peaks[g] + 1) for g, _ in keys]):
        counts = dict(zip(keys, combo, strict=True))
        total_r = [sum(n for (g, _), n in counts.items() if g == gi) for gi in range(len(d.gpus))]
        if any(total_r[g] > peaks[g] for g in range(len(d.gpus))):
            continue
        if opt.max_reserved_gpus is not None and sum(combo) > opt.max_reserved_gpus:
            continue
        commit = sum(
            n
            * pr[d.gpus[g]].reserved[i].usd_per_gpu_hour
            * HOURS_PER_YEAR
            * pr[d.gpus[g]].reserved[i].term_years
            for (g, i), n in counts.items()
        )
        if opt.max_commitment_usd is not None and commit > opt.max_commitment_usd + 1e-6:
            continue
        month_cost = np.zeros(len(months))
        for g, gpu in enumerate(d.gpus):
            p = pr[gpu]
            rate = sum(
                n * p.reserved[i].usd_per_gpu_hour for (gg, i), n in counts.items() if gg == g
            )
            cap_useful = opt.spot_capacity_gpus.get(gpu, math.inf) / (1 + opt.spot_overhead)
            for h in range(d.hours):
                f, x, r = int(d.firm[g, h]), int(d.interruptible[g, h]), total_r[g]
                hour_best = math.inf
                for rf in range(min(f, r) + 1):
                    for rx in range(min(x, r - rf) + 1):
                        # GPUs on spot deliver 1/(1+overhead) useful GPU-hours each, so the useful
                        # spot work is any whole number up to the capacity, or the capacity itself
                        choices = [float(v) for v in range(x - rx + 1) if v <= cap_useful + 1e-12]
                        if cap_useful < x - rx:
                            choices.append(cap_useful)
                        for sx in choices if p.spot is not None else [0.0]:
                            c = ((f - rf) + (x - rx - sx)) * p.on_demand.usd_per_gpu_hour
                            if sx and p.spot is not None:
                                c += sx * (1 + opt.spot_overhead) * p.spot.usd_per_gpu_hour
                            hour_best = min(hour_best, c)
                month_cost[month_of[h]] += hour_best + rate
        total = float(month_cost.sum())
        if opt.budget_usd is not None and total > opt.budget_usd + 1e-6:
            continue
        if opt.monthly_budget_usd is not None and month_cost.max() > opt.monthly_budget_usd + 1e-6:
            continue
        best = min(best, total)
    return best


def random_instance(rng: np.random.Generator, n_gpus: int) -> tuple[Demand, dict[str, GpuPrices]]:
    gpus = ("H100", "L4")[:n_gpus]
    hours = int(rng.integers(3, 6))
    firm = rng.integers(0, 3, size=(n_gpus, hours)).tolist()
    flex = rng.integers(0, 3, size=(n_gpus, hours)).tolist()
    pr = {}
    for gpu in gpus:
        od = float(rng.uniform(1, 3))
        spot = float(rng.uniform(0.2, 1.2)) * od if rng.random() < 0.8 else None
        reserved = [(1, float(rng.uniform(0.4, 0.9)) * od), (3, float(rng.uniform(0.3, 0.8)) * od)]
        pr[gpu] = prices(gpu, od, spot, reserved)
    # 22:00 on Jan 31: the few hours span two calendar months
    return demand(firm, flex, gpus, dt.datetime(2026, 1, 31, 22)), pr


@pytest.mark.parametrize("seed", range(12))
def test_matches_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    d, pr = random_instance(rng, n_gpus=1 + seed % 2)
    uncapped = FleetOptions(
        spot_overhead=float(rng.choice([0.0, 0.1, 0.5])),
        spot_capacity_gpus={g: float(rng.integers(0, 3)) for g in d.gpus if rng.random() < 0.5},
    )
    best = brute_force(d, pr, uncapped)
    # each cap set between "binding" and "loose", from the uncapped optimum
    caps = [
        uncapped,
        FleetOptions(
            spot_overhead=uncapped.spot_overhead,
            spot_capacity_gpus=uncapped.spot_capacity_gpus,
            max_reserved_gpus=int(rng.integers(0, 3)),
        ),
        FleetOptions(
            spot_overhead=uncapped.spot_overhead,
            spot_capacity_gpus=uncapped.spot_capacity_gpus,
            max_commitment_usd=float(rng.uniform(0, 3)) * HOURS_PER_YEAR,
        ),
        FleetOptions(
            spot_overhead=uncapped.spot_overhead,
            spot_capacity_gpus=uncapped.spot_capacity_gpus,
            monthly_budget_usd=best * float(rng.uniform(0.5, 1.0)),
            terms=(1,),
        ),
        FleetOptions(
            spot_overhead=uncapped.spot_overhead,
            spot_capacity_gpus=uncapped.spot_capacity_gpus,
            budget_usd=best * 1.01,
        ),
    ]
    for opt in caps:
        expected = brute_force(d, pr, opt)
        if math.isinf(expected):
            with pytest.raises(PlanError, match="no plan meets"):
                solve(d, pr, opt)
            continue
        got = solve(d, pr, opt)
        assert got.objective_usd == pytest.approx(expected, rel=1e-7, abs=1e-7), opt
        # the reported objective is what the dispatch really costs
        disp = dispatch(d, pr, got.counts, opt)
        real = (
            disp.reserved_usd_per_hour.sum() * d.hours
            + disp.spot_usd.sum()
            + disp.on_demand_usd.sum()
        )
        assert real == pytest.approx(expected, rel=1e-7, abs=1e-7)


@pytest.mark.parametrize("seed", range(6))
def test_cost_curve_matches_dispatch(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    d, pr = random_instance(rng, 1)
    opt = FleetOptions(spot_overhead=0.2, spot_capacity_gpus={"H100": 1.0})
    ks = np.arange(8, dtype=float)
    curve = cost_curve(d.firm[0], d.interruptible[0], _curve(pr["H100"], opt), ks)
    for k in range(8):
        p1 = prices(
            "H100",
            pr["H100"].on_demand.usd_per_gpu_hour,
            None if pr["H100"].spot is None else pr["H100"].spot.usd_per_gpu_hour,
            [(1, 0.0)],
        )
        disp = dispatch(d, {"H100": p1}, {("H100", 0): k}, opt)
        assert curve[k] == pytest.approx(disp.spot_usd.sum() + disp.on_demand_usd.sum())


def test_uncapped_milp_equals_closed_form() -> None:
    from gpuwise.fleet.demand import synthetic_demand

    d = synthetic_demand(("H100", "L4", "A100-80GB"), hours=24 * 60, seed=2, peak_gpus=40)
    pr = {g: prices(g, 3.0, 1.0, [(1, 2.1), (3, 1.6)]) for g in d.gpus}
    opt = FleetOptions(spot_capacity_gpus={"H100": 10.0})
    assert solve(d, pr, opt).counts == solve_uncapped(d, pr, opt)


# ---------------------------------------------------------------- known cases


def test_flat_demand_goes_all_reserved_when_reserved_is_cheapest() -> None:
    d = demand([[8] * 48], [[0] * 48])
    plan = plan_fleet(d, {"H100": prices("H100", 3.0, 2.5, [(1, 2.0), (3, 1.5)])})
    assert [(c.term_years, c.count) for c in plan.commitments] == [(3, 8)]
    assert plan.reserved_utilization == pytest.approx(1.0)
    assert plan.per_gpu[0].on_demand_gpu_hours == 0 and plan.per_gpu[0].spot_gpu_hours == 0
    assert plan.cost_usd == pytest.approx(8 * 48 * 1.5)
    assert plan.savings_fraction == pytest.approx(0.5)


def test_spiky_interruptible_demand_goes_to_spot() -> None:
    flex = [0] * 48
    for h in (3, 17, 30):
        flex[h] = 20  # rare, tall spikes: a reservation would sit idle
    d = demand([[0] * 48], [flex])
    plan = plan_fleet(d, {"H100": prices("H100", 3.0, 1.0, [(1, 2.0)])})
    assert plan.commitments == ()
    assert plan.per_gpu[0].on_demand_gpu_hours == 0
    assert plan.per_gpu[0].spot_gpu_hours == pytest.approx(60 * (1 + plan.spot_overhead))
    assert plan.best_single_billing == "spot"


@pytest.mark.parametrize("seed", range(5))
def test_non_interruptible_never_on_spot(seed: int) -> None:
    rng = np.random.default_rng(seed)
    firm = rng.integers(0, 30, size=(2, 200)).astype(float)
    flex = rng.integers(0, 30, size=(2, 200)).astype(float)
    d = Demand(dt.datetime(2026, 3, 1), ("H100", "L4"), firm, flex, "test")
    # spot absurdly cheap: it would take everything it is allowed to
    pr = {g: prices(g, 3.0, 0.01, [(1, 2.5)]) for g in d.gpus}
    opt = FleetOptions(spot_overhead=0.1)
    plan = plan_fleet(d, pr, opt, sensitivity=False)
    disp = dispatch(d, pr, plan.solver.counts, opt)
    spot_useful = disp.spot_gpu_hours / (1 + opt.spot_overhead)
    assert np.all(spot_useful <= flex + 1e-9)
    # all firm demand is served by reservations or on-demand
    assert np.allclose(disp.reserved_used + disp.on_demand + spot_useful, firm + flex)
    assert np.all(disp.on_demand + np.minimum(firm, disp.reserved_used) >= firm - 1e-9)


def test_spot_capacity_and_overhead_respected() -> None:
    d = demand([[0] * 10], [[10] * 10])
    opt = FleetOptions(spot_overhead=0.25, spot_capacity_gpus={"H100": 5.0})
    pr = {"H100": prices("H100", 3.0, 1.0, [])}
    plan = plan_fleet(d, pr, opt)
    disp = dispatch(d, pr, plan.solver.counts, opt)
    assert disp.spot_gpu_hours.max() == pytest.approx(5.0)  # GPUs on spot, overhead included
    # 4 useful GPUs on spot (5 / 1.25), 6 on demand, every hour
    assert plan.cost_usd == pytest.approx(10 * (5 * 1.0 + 6 * 3.0))


def test_reserved_unavailable_is_said() -> None:
    d = demand([[4] * 24], [[0] * 24])
    p = GpuPrices("H100", PriceQuote(3.0, "aws", "r"), None, (), ("aws 1y", "aws 3y"))
    plan = plan_fleet(d, {"H100": p})
    assert plan.commitments == ()
    assert any("reserved billing unavailable" in n and "aws 1y" in n for n in plan.notes)


def test_infeasible_budget_names_the_cheapest_cost() -> None:
    d = demand([[4] * 24], [[0] * 24])
    with pytest.raises(PlanError, match=r"budget_usd=10 \(the cheapest plan costs \$288\)"):
        plan_fleet(d, {"H100": prices("H100", 3.0, None, [])}, FleetOptions(budget_usd=10))


def test_sensitivity_rows() -> None:
    d = demand([[8] * 48], [[4] * 48])
    plan = plan_fleet(d, {"H100": prices("H100", 3.0, None, [(1, 2.0)])})
    assert [(c.count) for c in plan.commitments] == [12]
    names = [s.name for s in plan.sensitivity]
    assert names == [
        "demand -20%",
        "demand +20%",
        "spot price +25%",
        "spot price +50%",
        "spot price +100%",
    ]
    down, up = plan.sensitivity[0], plan.sensitivity[1]
    assert down.reserved_utilization == pytest.approx(0.8)  # 9.6 of 12 reserved GPUs busy
    assert down.cost_usd == pytest.approx(12 * 48 * 2.0)
    # re-chosen: 9 reserved + 0.6 on demand (0.6 × $3 < $2 per hour)
    assert down.reoptimized_cost_usd == pytest.approx(9 * 48 * 2.0 + 0.6 * 48 * 3.0)
    assert up.cost_usd == pytest.approx(12 * 48 * 2.0 + 2.4 * 48 * 3.0)
    # a spot price rise costs more only when spot is in the plan
    spotty = plan_fleet(demand([[0] * 48], [[4] * 48]), {"H100": prices("H100", 3.0, 1.0, [])})
    assert spotty.sensitivity[-1].cost_usd == pytest.approx(2 * spotty.cost_usd)


def test_huge_and_fractional_demand_stays_small_and_exact() -> None:
    # a peak of millions of GPUs must not make one cut per whole GPU
    d = demand([[2_000_000.5, 10, 3_000_000]], [[0.25, 7.75, 0]])
    pr = {"H100": prices("H100", 3.0, 1.0, [(1, 1.0)])}
    sol = solve(d, pr, FleetOptions())
    assert sol.constraints < 50
    assert sol.counts == solve_uncapped(d, pr, FleetOptions())
    # a reserved GPU costs $3 over the 3 hours. The 2,000,001st still saves $4.77 (half a firm
    # hour at $3, a quarter hour of spot at $1.075, a full hour at $3); the next saves only $3.
    assert sol.counts == {("H100", 0): 2_000_001}
    disp = dispatch(d, pr, sol.counts, FleetOptions())
    assert sol.objective_usd == pytest.approx(
        disp.reserved_usd_per_hour.sum() * 3 + disp.on_demand_usd.sum() + disp.spot_usd.sum()
    )


@pytest.mark.parametrize(
    ("hours", "terms", "extrapolated"),
    [
        (48, (1, 3), True),  # 2 days of demand, a 3-year reservation proposed
        (48, (1,), True),  # even 1 year outlasts 2 days
        (int(3 * HOURS_PER_YEAR) + 24, (3,), False),  # the demand covers the whole term
    ],
)
def test_a_term_longer_than_the_demand_is_flagged_as_extrapolated(
    hours: int, terms: tuple[int, ...], extrapolated: bool
) -> None:
    d = demand([[8] * hours], [[0] * hours])
    plan = plan_fleet(
        d,
        {"H100": prices("H100", 3.0, 2.5, [(1, 2.0), (3, 1.5)])},
        FleetOptions(terms=terms),
        sensitivity=False,
    )
    assert plan.commitments  # flat demand: reserving is cheapest
    assert plan.extrapolated is extrapolated
    said = [n for n in plan.notes if n.startswith("extrapolated:")]
    assert bool(said) is extrapolated
    if extrapolated:
        assert f"{max(c.term_years for c in plan.commitments)}-year reservation" in said[0]


def test_no_reservation_is_never_extrapolated() -> None:
    d = demand([[0] * 24], [[5] * 24])  # interruptible only, spot is cheapest
    plan = plan_fleet(d, {"H100": prices("H100", 3.0, 0.5, [(1, 2.0)])}, sensitivity=False)
    assert not plan.commitments and plan.extrapolated is False
