"""Paying less for a fleet: the reserved/spot/on-demand mix for a demand profile
(:func:`plan_fleet`), owning versus renting (:func:`compute_tco`), and weighted vendor scoring
(:func:`score_vendors`). Pure Python + numpy/scipy: no network, no CLI.
"""

from gpuwise.fleet.demand import (
    Demand,
    demand_to_csv,
    parse_demand_csv,
    read_demand_csv,
    synthetic_demand,
)
from gpuwise.fleet.optimize import (
    DEFAULT_SPOT_OVERHEAD,
    Commitment,
    FleetOptions,
    FleetPlan,
    MonthCost,
    Scenario,
    plan_fleet,
    solve,
)
from gpuwise.fleet.pricing import (
    GpuPrices,
    PriceQuote,
    ReservedOption,
    gpu_prices,
    parse_reserved_overrides,
)
from gpuwise.fleet.tco import DEFAULT_PUE, CloudRates, OwnCosts, TcoResult, compute_tco
from gpuwise.fleet.vendors import (
    DEFAULT_WEIGHTS,
    Criteria,
    VendorRanking,
    catalog_filler,
    parse_criteria,
    read_criteria,
    score_vendors,
)

__all__ = [
    "DEFAULT_PUE",
    "DEFAULT_SPOT_OVERHEAD",
    "DEFAULT_WEIGHTS",
    "CloudRates",
    "Commitment",
    "Criteria",
    "Demand",
    "FleetOptions",
    "FleetPlan",
    "GpuPrices",
    "MonthCost",
    "OwnCosts",
    "PriceQuote",
    "ReservedOption",
    "Scenario",
    "TcoResult",
    "VendorRanking",
    "catalog_filler",
    "compute_tco",
    "demand_to_csv",
    "gpu_prices",
    "parse_criteria",
    "parse_demand_csv",
    "parse_reserved_overrides",
    "plan_fleet",
    "read_criteria",
    "read_demand_csv",
    "score_vendors",
    "solve",
    "synthetic_demand",
]
