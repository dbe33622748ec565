"""How fast `gpuwise fleet` solves: a year of hourly demand (8,760 h) for 5 GPU types.

    PYTHONPATH=src python benchmarks/fleet_speed.py [--repeat 5]

Target (issue 5): the MILP for 8,760 hours × 5 GPU types solves in under 2 s. Prices are fixed
in this script (not the catalog) so that every GPU type has spot and 1y/3y reservation options
and the timing does not depend on which discounts are configured. Rows: without caps, with a
monthly budget (12 cuts sets per GPU type), with a commitment cap, and at 10× the scale.
"""

from __future__ import annotations

import argparse
import statistics
import time

from gpuwise.fleet.demand import synthetic_demand
from gpuwise.fleet.optimize import FleetOptions, plan_fleet, solve
from gpuwise.fleet.pricing import GpuPrices, PriceQuote, ReservedOption

GPUS = ("H100", "A100-80GB", "L4", "L40S", "A10G")
# illustrative $/GPU-hour for the benchmark only: on-demand, spot, 1y and 3y reserved
PRICES = {
    "H100": (3.0, 1.3),
    "A100-80GB": (2.8, 0.9),
    "L4": (0.7, 0.25),
    "L40S": (1.5, 0.5),
    "A10G": (1.0, 0.36),
}


def prices() -> dict[str, GpuPrices]:
    out = {}
    for gpu, (od, spot) in PRICES.items():
        out[gpu] = GpuPrices(
            gpu,
            PriceQuote(od, "bench", "-"),
            PriceQuote(spot, "bench", "-"),
            (
                ReservedOption("bench", 3, od * 0.55, 0.45, "bench"),
                ReservedOption("bench", 1, od * 0.7, 0.3, "bench"),
            ),
            (),
        )
    return out


def timed(fn, repeat: int) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), max(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    pr = prices()
    solve(synthetic_demand(GPUS[:1], hours=48, seed=0), pr, FleetOptions())  # warm the imports
    rows = []
    for label, peak, opts in (
        ("no caps", 64.0, FleetOptions()),
        (
            "spot capacity 16 GPUs/type",
            64.0,
            FleetOptions(spot_capacity_gpus=dict.fromkeys(GPUS, 16.0)),
        ),
        ("monthly budget", 64.0, FleetOptions(monthly_budget_usd=1e6)),
        ("commitment cap $1M", 64.0, FleetOptions(max_commitment_usd=1e6)),
        ("no caps, 10x scale (peak ~1,000 GPUs)", 640.0, FleetOptions()),
    ):
        demand = synthetic_demand(GPUS, hours=8760, seed=1, peak_gpus=peak)
        sol = solve(demand, pr, opts)
        med, worst = timed(lambda d=demand, o=opts: solve(d, pr, o), args.repeat)
        full, _ = timed(
            lambda d=demand, o=opts: plan_fleet(d, pr, o, sensitivity=False),
            max(1, args.repeat // 2),
        )
        rows.append((label, sol.variables, sol.constraints, med, worst, full))
    print(
        f"fleet solve: 8,760 h × {len(GPUS)} GPU types, median of {args.repeat} runs (target < 2 s)"
    )
    print(
        f"{'case':40} {'vars':>6} {'rows':>7} {'solve med s':>12} {'solve max s':>12} {'plan s':>8}"
    )
    for label, nv, nc, med, worst, full in rows:
        print(f"{label:40} {nv:>6} {nc:>7} {med:>12.3f} {worst:>12.3f} {full:>8.3f}")


if __name__ == "__main__":
    main()
